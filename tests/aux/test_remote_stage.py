"""A stage served by auxiliary workers (driver.aux, no pickle on the wire), shared by the
pipelines of two ranks."""

from __future__ import annotations

import multiprocessing as mp
import pickle
import threading
import time

import numpy as np
import pytest
import torch

from driver.aux.remote_stage import RemoteStage, serve_stage
from driver.data import CorruptSample, DataPipeline, PipelineConfig, StageHung
from driver.data.stages import FunctionStage, SampleContext, Stage, WorkerInfo
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


@pytest.fixture
def threads_serving(tmp_path):
    """Two services in threads, each tagging samples with its name."""
    stop, threads, addresses = threading.Event(), [], {}
    for tag in ("a", "b"):
        stage = FunctionStage(lambda sample, tag=tag: {**sample, "by": tag}, name=f"tag-{tag}")
        address = f"ipc://{tmp_path}/{tag}.sock"
        threads.append(threading.Thread(target=serve_stage, args=(stage, address, stop, 0.05)))
        threads[-1].start()
        addresses[address] = 1
    yield addresses
    stop.set()
    for thread in threads:
        thread.join(10)


def test_samples_cross_without_pickle_and_keep_their_types(threads_serving, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("pickle used")

    monkeypatch.setattr(pickle, "dumps", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    client = RemoteStage(threads_serving, "tag").client(WorkerInfo("producer", 0, 1))
    sample = {"t": torch.arange(4.0), "pair": (1, "x"), "a": np.ones((2, 2), ">f4"), "b": b"z"}
    out = client.process(sample, SampleContext(3, 0, 9, 1))
    assert torch.equal(out["t"], sample["t"]) and out["pair"] == (1, "x") and out["b"] == b"z"
    assert out["a"].dtype == np.dtype(">f4") and np.array_equal(out["a"], sample["a"])
    client.close()


def test_requests_spread_over_several_proxies(threads_serving):
    client = RemoteStage(threads_serving, "tag").client(WorkerInfo("producer", 0, 0))
    for _ in range(500):  # both proxies connected and reporting their worker
        weights = [p["weight"] for p in client.aux.stats()["proxies"].values()]
        if weights == [1, 1]:
            break
        time.sleep(0.02)
    tags = [client.process({"i": i}, SampleContext(i, 0, i, 0))["by"] for i in range(20)]
    assert sorted(set(tags)) == ["a", "b"] and min(tags.count("a"), tags.count("b")) >= 5
    client.close()
