"""scripts/bench/thread_cpu.py: CPU per thread from /proc, per unit of work."""

from __future__ import annotations

import os
import threading

from tests.benches import load_bench


def test_per_unit_divides_each_threads_growth():
    probe = load_bench("thread_cpu")
    before, after = {"a:1": 1_000, "b:2": 0}, {"a:1": 5_000, "b:2": 2_000, "c:3": 4_000}
    assert probe.per_unit(before, after, per=2) == {"a:1": 2.0, "b:2": 1.0, "c:3": 2.0}


def test_a_busy_thread_is_counted_and_an_idle_one_is_left_out_of_the_lines():
    probe = load_bench("thread_cpu")
    stop, spun = threading.Event(), threading.Event()

    def spin():
        total = 0
        while not stop.is_set():
            total += sum(range(10_000))
            spun.set()

    idle = threading.Thread(target=stop.wait, daemon=True)
    idle.start()
    worker = threading.Thread(target=spin, daemon=True)
    with probe.ThreadCpu({"me": os.getpid()}) as cpu:
        worker.start()
        spun.wait(10)
        stop.wait(0.3)  # the busy thread runs while the main one waits
    stop.set()
    worker.join()
    threads = probe.per_unit(cpu.before["me"], cpu.after["me"], per=1)
    assert max(threads.values()) > 100_000  # microseconds: the spinner's 0.1 s at least
    assert min(threads.values()) < 1_000  # the idle thread
    (line,) = cpu.lines(per=1, floor_us=1_000)
    assert line.startswith("me: python ")  # threads of one name (comm) summed
