"""A stage served over ZeroMQ by another process, shared by the pipelines of two ranks."""

from __future__ import annotations

import multiprocessing as mp

import numpy as np
import pytest

from driver.data import CorruptSample, DataPipeline, PipelineConfig, StageHung
from driver.data.remote import RemoteStage, serve_stage
from driver.data.stages import Stage
from tests.data.conftest import IndexDataset, ids_of

CFG = PipelineConfig(batch_size=4, producers=2, seed=3, poll_interval_s=0.05)


class Jitter(Stage):
    """Adds seeded noise and the serving process id; fails on sample 7."""

    name = "jitter"

    def process(self, sample, ctx):
        if sample["id"] == 7:
            raise ValueError("cannot encode sample")
        noise = ctx.rng().random(2).astype(np.float32)
        return {**sample, "x": sample["x"][:2] + noise, "pid": __import__("os").getpid()}


def _serve(address, stop):
    serve_stage(Jitter(), address, stop)


@pytest.fixture
def service(tmp_path):
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    address = f"ipc://{tmp_path}/jitter.sock"
    proc = ctx.Process(target=_serve, args=(address, stop), daemon=True)
    proc.start()
    yield address, proc
    stop.set()
    proc.join(10)
    if proc.exitcode is None:
        proc.kill()
        proc.join()


def _run(dataset, stage, rank, cfg=CFG):
    with DataPipeline(dataset, cfg, rank, 2, stages=[stage]) as data:
        return [(b["id"].tolist(), b["x"].tolist(), b["pid"].tolist()) for b in data]


def test_one_service_serves_two_ranks_like_a_local_stage(service):
    address, proc = service
    data = IndexDataset(40, corrupt=())
    cfg = PipelineConfig(**{**CFG.__dict__, "on_corrupt": "skip", "fetch_threads": 2})
    remote = [_run(data, RemoteStage(address, "jitter"), rank, cfg) for rank in (0, 1)]
    local = [_run(data, Jitter(), rank, cfg) for rank in (0, 1)]
    for theirs, ours in zip(remote, local, strict=True):
        assert [(ids, x) for ids, x, _ in theirs] == [(ids, x) for ids, x, _ in ours]
    assert {pid for rank in remote for _, _, pids in rank for pid in pids} == {proc.pid}
    seen = sorted(i for rank in remote for ids, _, _ in rank for i in ids)
    assert 7 not in seen and len(seen) == 39


def test_service_error_is_a_corrupt_sample_with_its_index(service):
    address, _ = service
    with pytest.raises(CorruptSample, match=r"sample 7 .*stage jitter: .*ValueError: cannot"):
        for rank in (0, 1):
            _run(IndexDataset(40), RemoteStage(address, "jitter"), rank)


def test_silent_service_is_reported_hung(tmp_path):
    stage = RemoteStage(f"ipc://{tmp_path}/nobody.sock", "encoder")
    cfg = PipelineConfig(**{**CFG.__dict__, "sample_timeout_s": 0.5})
    with DataPipeline(IndexDataset(8), cfg, 0, 1, stages=[stage]) as data:
        with pytest.raises(StageHung, match=r"producer-\d .*sample \d+ .*sample_timeout_s"):
            ids_of(data)
