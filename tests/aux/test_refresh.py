"""Weight refresh: flat layouts, the versioned swap, and a real two-process gloo group
(rank 0 sends three versions; the receiver only ever sees complete ones, in order)."""

from __future__ import annotations

import multiprocessing as mp
import threading

import pytest
import torch

from driver.aux.refresh import Receiver, Versioned, flatten, layout_of, unflatten
from driver.aux.refresh_sender import Sender


def state(value: float) -> dict:
    return {
        "w": torch.full((3, 4), value),
        "b": torch.full((4,), value, dtype=torch.bfloat16),
        "steps": torch.tensor(7),  # not floating: not sent
    }


def test_layout_flatten_unflatten_round_trip():
    layout = layout_of(state(1.5))
    assert layout == [["w", [3, 4], "float32"], ["b", [4], "bfloat16"]]
    flat = flatten(state(1.5), layout)
    assert flat.shape == (16,) and flat.dtype == torch.float32
    back = unflatten(flat, layout)
    assert back["b"].dtype == torch.bfloat16 and torch.equal(back["w"], state(1.5)["w"])


def test_versioned_swaps_whole_states_and_never_goes_back():
    served = Versioned()
    old = {"w": torch.zeros(2)}
    served.set(1, old)
    version, held = served.get()  # a request holds version 1
    served.set(2, {"w": torch.ones(2)})
    served.set(1, {"w": torch.full((2,), 9.0)})  # a stale version is ignored
    assert version == 1 and torch.equal(held["w"], torch.zeros(2))
    assert served.get()[0] == 2 and torch.equal(served.get()[1]["w"], torch.ones(2))


def receive(addr, prefix, size, layout, queue) -> None:
    """The worker process: receive versions until STOP, report (version, consistent?)."""
    seen = []

    def target(version, got):
        values = {float(t.float().min()) for t in got.values()}
        values |= {float(t.float().max()) for t in got.values()}
        seen.append((version, values == {float(version)}))

    receiver = Receiver(addr, prefix, 1, size, layout, "gloo", 30.0, target)
    receiver.start()
    receiver.thread.join(60)
    queue.put((seen, receiver.error))


def test_two_processes_receive_every_version_whole():
    layout = layout_of(state(0.0))
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = []

    def join(addr, prefix, size):
        proc = ctx.Process(target=receive, args=(addr, prefix, size, layout, queue))
        proc.start()
        procs.append(proc)
        return lambda: None

    sender = Sender("evaluator", 1, join, layout, "gloo", 30.0, host="127.0.0.1")
    for version in (1, 2, 3):
        assert sender.push(version, state(float(version)))
        sender.wait(60)
    sender.close()
    seen, error = queue.get(timeout=60)
    procs[0].join(30)
    assert error is None and sender.failures == 0 and sender.sent == 3
    assert seen == [(1, True), (2, True), (3, True)]


def test_push_while_one_is_in_flight_is_skipped():
    sender = Sender("evaluator", 1, None, layout_of(state(0.0)), "gloo", 5.0, host="127.0.0.1")
    release = threading.Event()
    sender.thread = threading.Thread(target=release.wait)
    sender.thread.start()
    assert not sender.push(5, state(5.0))
    release.set()
    sender.thread.join()
    assert sender.skipped == 1


@pytest.mark.parametrize("bad", [RuntimeError("peer gone")])
def test_a_failed_broadcast_is_counted_and_the_group_formed_again(bad):
    sender = Sender("evaluator", 1, None, layout_of(state(0.0)), "gloo", 5.0, host="127.0.0.1")
    formed = []

    def form():
        formed.append(1)
        raise bad

    sender._form = form
    sender.push(1, state(1.0))
    sender.wait(10)
    sender.push(2, state(2.0))
    sender.wait(10)
    assert sender.failures == 2 and len(formed) == 2 and sender.last_error.endswith("peer gone")


def test_a_member_that_stopped_receiving_gets_a_new_group():
    """`alive` says a member restarted: the next version goes to a group formed again
    (a new generation and prefix) with a fresh receiver."""
    layout = layout_of(state(0.0))
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs, prefixes = [], []

    def join(addr, prefix, size):
        prefixes.append(prefix)
        proc = ctx.Process(target=receive, args=(addr, prefix, size, layout, queue))
        proc.start()
        procs.append(proc)
        return lambda: None

    checks = iter([False])  # before version 2: the member is gone
    sender = Sender("evaluator", 1, join, layout, "gloo", 30.0, host="127.0.0.1",
                    alive=lambda prefix: next(checks, True))  # fmt: skip
    sender.push(1, state(1.0))
    sender.wait(60)
    sender.push(2, state(2.0))
    sender.wait(60)
    sender.close()
    results = [queue.get(timeout=60) for _ in procs]
    for proc in procs:
        proc.join(30)
    assert prefixes == ["refresh/evaluator/1/", "refresh/evaluator/2/"]
    seen = sorted(v for got, _ in results for v in got)
    assert seen == [(1, True), (2, True)] and sender.sent == 2 and sender.failures == 0
