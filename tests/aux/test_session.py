"""A training rank's AuxSession against real workers and proxies in this process (no Ray):
conditioning embeddings per batch, the evaluator's scores in rank 0's metrics, the data
stage's proxies, and nothing when the run has no services."""

from __future__ import annotations

import time

import pytest
import torch

from driver.aux.proxy import ProxyServer
from driver.aux.services.encoder import EncoderHandler
from driver.aux.services.evaluator import EvaluatorHandler
from driver.aux.session import AuxSession
from driver.config.compose import compose
from driver.trainer.build import aux_session
from driver.workloads import build
from tests.driver.conftest import TINY_DIT


def serve(tmp_path, name: str, handler):
    from driver.aux.worker import WorkerServer

    handler.setup()
    worker = WorkerServer(handler, f"ipc://{tmp_path}/{name}.sock")
    proxy = ProxyServer(name, [worker.start()])
    return worker, proxy, proxy.start()


@pytest.fixture
def session(tmp_path):
    cfg, _ = compose(TINY_DIT, ["model.d_model=32", "model.n_layers=1", "data.size=64"])
    evaluator = EvaluatorHandler(cfg.aux.services["evaluator"].kwargs["model"].__dict__,
                                 cfg.aux.services["evaluator"].kwargs["data"].__dict__,
                                 {"dim": 64, "seed": 0}, batches=1, batch_size=8)  # fmt: skip
    servers = [serve(tmp_path, "encoder", EncoderHandler(64, 0)),
               serve(tmp_path, "evaluator", evaluator)]  # fmt: skip
    spec = {"fleet": None, "services": {
        name: {"proxies": {address: 1}, "info": info, "deadline_s": 10.0, "retries": 1,
               "workers": []}
        for name, (_, _, address), info in zip(
            ("encoder", "evaluator"), servers, ({"dim": 64}, {}), strict=True)
    }}  # fmt: skip
    aux = AuxSession(cfg, spec, rank=0)
    yield cfg, aux, evaluator
    aux.close(wait=False)
    for worker, proxy, _ in servers:
        proxy.stop()
        worker.stop()


def test_batches_carry_their_embeddings(session):
    cfg, aux, _ = session
    assert aux.cond_dim() == 64
    images = [torch.randn(4, 3, 16, 16) for _ in range(3)]
    condition = aux.conditioner()
    got = [condition(image) for image in images]
    assert len(got) == 3
    for (batch, emb), sent in zip(got, images, strict=True):
        assert batch is sent and emb.shape == (4, 64) and emb.dtype == torch.float32
    model = build(cfg.model, cfg.data, cond_dim=aux.cond_dim()).model
    assert model(got[0][0], torch.rand(4), got[0][1]).shape == images[0].shape


def test_scores_reach_rank_zeros_metrics_and_the_final_summary(session):
    cfg, aux, evaluator = session
    state = build(cfg.model, cfg.data, cond_dim=64).model.state_dict()
    evaluator.load_weights(5, state)
    aux.evaluations.append((5, aux.clients["evaluator"].submit("evaluate", {"version": 5})))
    deadline = time.time() + 10
    row = {}
    while "aux/evaluator/eval_loss" not in row and time.time() < deadline:
        row = aux.metrics()
        time.sleep(0.05)
    assert row["aux/evaluator/eval_version"] == 5 and row["aux/evaluator/eval_loss"] > 0
    assert aux.close()["aux/evaluator/eval_loss"] == row["aux/evaluator/eval_loss"]


def test_remote_stage_points_at_the_services_proxies(session):
    cfg, aux, _ = session
    cfg.data.remote_stage = "encoder"
    (stage,) = aux.stages()
    assert stage.proxies == aux.services["encoder"]["proxies"] and stage.deadline_s == 10.0


def test_a_rank_calls_its_own_nodes_worker_directly(session, tmp_path):
    """The spec's `endpoints` of the rank's node are called without a proxy, and that
    node's proxy is left out; a rank on another node goes through the proxy."""
    cfg, _, _ = session
    worker, proxy, address = serve(tmp_path, "enc", EncoderHandler(8, 0))
    spec = {"fleet": None, "services": {"encoder": {
        "proxies": {address: 1}, "nodes": {address: "node-a"}, "info": {"dim": 8},
        "endpoints": {"node-a": [worker.address]}, "deadline_s": 10.0, "retries": 1,
        "workers": []}}}  # fmt: skip
    here = AuxSession(cfg, spec, rank=0, where=("node-a", 0.5))
    there = AuxSession(cfg, spec, rank=1, where=("node-b", 0.5))
    try:
        links = here.clients["encoder"].stats()["proxies"]
        assert list(links) == [worker.address] and links[worker.address]["direct"]
        assert list(there.clients["encoder"].stats()["proxies"]) == [address]
        for aux in (here, there):
            reply = aux.clients["encoder"].call("encode", {"images": torch.zeros(2, 3, 8, 8)})
            assert reply["embeddings"].shape == (2, 8)
        assert proxy.stats()["forwarded"] == 1  # rank 1's call only
        cfg.data.remote_stage = "encoder"
        (stage,) = here.stages()
        assert stage.proxies == {} and stage.workers == [worker.address]
        assert here.links(
            spec["services"]["encoder"],
            {"proxies": {"tcp://new:1": 1}, "nodes": {"tcp://new:1": "node-a"}},
        ) == ({}, [worker.address])  # a restarted proxy on this node stays left out
    finally:
        for aux in (here, there):
            aux.close(wait=False)
        proxy.stop()
        worker.stop()


def test_no_services_no_session():
    cfg, _ = compose(TINY_DIT, ["aux=none"])
    assert aux_session(cfg, {"fleet": None, "services": {}}, 0) is None
    assert aux_session(cfg, None, 0) is None
