"""Faults: crashed and hung workers, corrupt samples, interrupts and a killed trainer."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from driver.data import (
    CorruptSample,
    DataPipeline,
    PipelineConfig,
    PipelineError,
    StageCrashed,
    StageHung,
    default_collate,
)
from driver.data.runtime import SHM_PREFIX
from driver.data.sampling import epoch_permutation
from tests.data.conftest import IndexDataset, ids_of
from tests.support.signals import describe_tree

CFG = PipelineConfig(batch_size=4, producers=2, seed=5, poll_interval_s=0.05, shuffle=False)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cfg(**kwargs) -> PipelineConfig:
    return PipelineConfig(**{**CFG.__dict__, **kwargs})


def _die_on(index):
    def stage(sample):
        if sample["id"] == index:
            os._exit(3)
        return sample

    return stage


def _sleep_on(index):
    def stage(sample):
        if sample["id"] == index:
            time.sleep(60)
        return sample

    return stage


def test_producer_crash_names_the_stage_and_sample():
    with DataPipeline(IndexDataset(32), CFG, 0, 1, stages=[_die_on(9)]) as data:
        with pytest.raises(StageCrashed, match=r"producer-\d .*exited with code 3 .*sample 9 "):
            ids_of(data)


def test_producer_hang_names_the_stage_and_sample():
    cfg = _cfg(sample_timeout_s=0.5)
    with DataPipeline(IndexDataset(32), cfg, 0, 1, stages=[_sleep_on(6)]) as data:
        with pytest.raises(StageHung, match=r"producer-\d .*sample 6 .*sample_timeout_s=0.5"):
            ids_of(data)


def test_hang_with_fetch_threads_names_the_sample():
    cfg = _cfg(sample_timeout_s=0.5, fetch_threads=4)
    with DataPipeline(IndexDataset(32), cfg, 0, 1, stages=[_sleep_on(6)]) as data:
        with pytest.raises(StageHung, match=r"producer-\d .*sample 6 .*sample_timeout_s=0.5"):
            ids_of(data)


def test_collator_crash_names_the_step():
    def collate(samples):
        if samples[0]["id"] == 8:
            os._exit(4)
        return default_collate(samples)

    with DataPipeline(IndexDataset(32), CFG, 0, 1, collate_fn=collate) as data:
        with pytest.raises(StageCrashed, match=r"collator-0 .*code 4 while collating step 2"):
            ids_of(data)


def test_corrupt_sample_fails_with_its_index():
    with DataPipeline(IndexDataset(32, corrupt=(13,)), CFG, 0, 1) as data:
        with pytest.raises(CorruptSample, match=r"sample 13 .*fetch: ValueError: cannot decode"):
            ids_of(data)


def test_corrupt_samples_are_skipped_and_reported():
    cfg = _cfg(on_corrupt="skip")
    with DataPipeline(IndexDataset(32, corrupt=(1, 13, 14, 15, 16)), cfg, 0, 1) as data:
        seen = sum(ids_of(data), [])
        assert sorted(index for _, index, _ in data.skipped) == [1, 13, 14, 15, 16]
        assert data.state_dict()["skipped"] == 5
    assert seen == [i for i in range(32) if i not in (1, 13, 14, 15, 16)]


def test_skipped_samples_count_when_their_batch_is_taken_not_when_prefetched():
    cfg = _cfg(on_corrupt="skip")
    with DataPipeline(IndexDataset(16, corrupt=(1,)), cfg, 0, 1) as data:
        ids_of(data)  # epoch 0; the workers go on into epoch 1 meanwhile
        time.sleep(0.5)  # let epoch 1's first batch (with sample 1 again) arrive ahead
        data._receive()
        assert [(epoch, index) for epoch, index, _ in data.skipped] == [(0, 1)]
        assert data.state_dict()["skipped"] == 1
        ids_of(data, steps=1)  # now epoch 1 takes it
        assert [(epoch, index) for epoch, index, _ in data.skipped] == [(0, 1), (1, 1)]


def test_too_many_skips_fail():
    cfg = _cfg(on_corrupt="skip", max_skipped=2)
    with DataPipeline(IndexDataset(32, corrupt=(1, 2, 3)), cfg, 0, 1) as data:
        with pytest.raises(PipelineError, match="max_skipped=2"):
            ids_of(data)


def test_pipeline_is_restartable_after_close():
    data = DataPipeline(IndexDataset(16), CFG, 0, 1)
    ids_of(data, steps=1)
    data.close()
    assert len(ids_of(data)) == 3  # workers restart from the recorded position
    data.close()


def test_garbage_collected_pipeline_stops_its_workers():
    data = DataPipeline(IndexDataset(16), CFG, 0, 1)
    ids_of(data, steps=1)
    procs = [p for _, p in data._runtime.procs]
    del data
    __import__("gc").collect()
    assert all(p.exitcode is not None for p in procs)


SCRIPT = textwrap.dedent(
    """
    import json, multiprocessing as mp, os, signal, sys, time
    from driver.data import DataPipeline, PipelineConfig
    from tests.data.conftest import IndexDataset
    cfg = PipelineConfig(batch_size=4, producers=2, seed=5, poll_interval_s=0.05)
    data = DataPipeline(IndexDataset(400), cfg, rank=1, world_size=2)
    it = iter(data)
    seen = [next(it)["id"].tolist() for _ in range(int(sys.argv[1]))]
    state = data.state_dict()
    kids = [p.pid for p in mp.active_children()]
    sigint = {"handler": str(signal.getsignal(signal.SIGINT)),
              "blocked": signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])}
    print(json.dumps({"state": state, "seen": seen, "kids": kids, "sigint": sigint}), flush=True)
    if sys.argv[2] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    for batch in it:   # keep training until interrupted: this epoch,
        time.sleep(0.01)
    while True:        # then the next ones (a signal that comes late still finds it training)
        for batch in data:
            time.sleep(0.01)
    """
)


def _trainer(k: int, mode: str) -> tuple[subprocess.Popen, dict]:
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(k), mode], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    return proc, json.loads(proc.stdout.readline())


def _gone(pids: list[int], prefix: str) -> bool:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        alive = [p for p in pids if os.path.exists(f"/proc/{p}")]
        leaked = [f for f in os.listdir("/dev/shm") if f.startswith(prefix)]
        if not alive and not leaked:
            return True
        time.sleep(0.1)
    return False


def test_sigkilled_trainer_leaves_nothing_and_resumes_exactly():
    proc, out = _trainer(5, "kill")
    assert proc.wait(30) == -signal.SIGKILL
    assert _gone(out["kids"], f"{SHM_PREFIX}{proc.pid}-")
    cfg = PipelineConfig(batch_size=4, producers=2, seed=5, poll_interval_s=0.05)
    with DataPipeline(IndexDataset(400), cfg, rank=1, world_size=2) as data:
        data.load_state_dict(out["state"])
        after = ids_of(data)
    perm = epoch_permutation(5, 0, 400).tolist()
    expected = [perm[s * 8 + 4 : s * 8 + 8] for s in range(50)]
    assert sum(a != b for a, b in zip(out["seen"] + after, expected, strict=True)) == 0


def test_keyboard_interrupt_stops_workers_and_frees_memory():
    proc, out = _trainer(2, "run")
    try:
        # a SIGINT ignored or blocked by this process is inherited by the child (seen lost
        # in whole-suite runs on two pytest workers: this says which, if so)
        assert out["sigint"] == {"handler": str(signal.default_int_handler), "blocked": False}
        proc.send_signal(signal.SIGINT)
        try:
            assert proc.wait(30) != 0
        except subprocess.TimeoutExpired:
            pytest.fail(f"still training 30 s after SIGINT:\n{describe_tree(proc.pid)}")
    finally:
        if proc.poll() is None:  # never left training for the rest of the suite
            proc.kill()
            proc.wait(30)
    assert _gone(out["kids"], f"{SHM_PREFIX}{proc.pid}-")


def test_dropping_a_batch_runs_no_python_code():
    """A KeyboardInterrupt raised inside a weakref callback is printed and dropped, so a
    Ctrl-C that lands while a batch is freed would be lost: the slot is given back by a
    builtin callback, where no signal handler can run."""
    with DataPipeline(IndexDataset(32), CFG, 0, 1) as data:
        batch = next(iter(data))
        calls = []
        sys.setprofile(lambda frame, event, arg: calls.append((event, frame.f_code)))
        try:
            del batch
        finally:
            sys.setprofile(None)
        assert [code for event, code in calls if event == "call"] == []
        assert len(ids_of(data)) == 7  # and the slot came back


def test_batch_timeout_describes_every_worker():
    cfg = _cfg(batch_timeout_s=0.3, producers=1)
    with DataPipeline(IndexDataset(32), cfg, 0, 1, stages=[_sleep_on(0)]) as data:
        with pytest.raises(
            PipelineError, match=r"batch_timeout_s=0.3: feeder .*producer-0 .*sample 0"
        ):
            ids_of(data)


def test_collator_error_before_every_worker_is_ready_is_not_lost(monkeypatch):
    from driver.data import workers

    prepare = workers.prepare_worker

    def slow_ready(shared, row):  # producer-1 reports ready after step 0 was collated
        if row == 2:
            time.sleep(1.5)
        prepare(shared, row)

    monkeypatch.setattr(workers, "prepare_worker", slow_ready)

    def collate(samples):
        raise ValueError("ragged batch")

    cfg = _cfg(batch_timeout_s=5)
    with DataPipeline(IndexDataset(32), cfg, 0, 1, collate_fn=collate) as data:
        with pytest.raises(PipelineError, match=r"collator failed on step 0 .*ragged batch"):
            ids_of(data)


def test_a_later_steps_collator_error_is_raised_at_its_step():
    def collate(samples):  # step 2's batch fails; it is collated while steps 0 and 1 train
        if any(int(s["id"]) >= 8 for s in samples):
            raise ValueError("ragged batch")
        return default_collate(samples)

    got = []
    with DataPipeline(IndexDataset(32), _cfg(batch_timeout_s=5), 0, 1, collate_fn=collate) as data:
        with pytest.raises(PipelineError, match=r"collator failed on step 2 .*ragged batch"):
            for batch in data:
                got.append(batch["id"].tolist())
    assert got == [[0, 1, 2, 3], [4, 5, 6, 7]]
