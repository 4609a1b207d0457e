"""The shipped services in process (no Ray, no sockets): the frozen encoder is deterministic
and reports its size; the evaluator scores only complete refreshed versions, the same
weights score the same, and trained-for-longer weights are what it scores."""

from __future__ import annotations

import math
from dataclasses import asdict

import numpy as np
import pytest
import torch

from driver.aux.handler import RequestContext, load_handler
from driver.aux.services.encoder import EncoderHandler
from driver.aux.services.evaluator import EvaluatorHandler
from driver.config.schema import DiTModelConfig, ImageDataConfig, LMModelConfig, TextDataConfig
from driver.workloads import build

CTX = RequestContext(rank=0, request_id=1, deadline=math.inf)
ENC = {"dim": 16, "seed": 3}


def test_encoder_is_frozen_deterministic_and_reports_its_size():
    handler = load_handler("driver.aux.services.encoder:EncoderHandler", ENC)
    handler.setup()
    assert handler.ready() == {"dim": 16, "seed": 3}
    images = np.random.default_rng(0).normal(size=(4, 3, 16, 16)).astype(np.float32)
    images.setflags(write=False)  # arrays arrive as read-only views of a frame
    first = handler.handle("encode", {"images": images}, CTX)["embeddings"]
    again = EncoderHandler(**ENC).handle("encode", {"images": images}, CTX)["embeddings"]
    assert first.shape == (4, 16) and np.allclose(first, again)
    assert np.allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize(
    ("method", "payload", "message"),
    [("decode", {}, "unknown method"), ("encode", {"images": np.zeros((3, 8, 8))}, "batch")],
)
def test_encoder_refuses_bad_requests(method, payload, message):
    with pytest.raises(ValueError, match=message):
        EncoderHandler().handle(method, payload, CTX)


def dit_evaluator(**kw) -> tuple[EvaluatorHandler, torch.nn.Module]:
    model, data = DiTModelConfig(d_model=32, n_layers=1), ImageDataConfig(size=64)
    handler = EvaluatorHandler(asdict(model), asdict(data), ENC, batches=2, batch_size=8, **kw)
    handler.setup()
    trained = build(model, data, cond_dim=ENC["dim"]).model
    return handler, trained


def test_evaluator_scores_only_complete_versions():
    handler, trained = dit_evaluator(wait_s=0.05)
    assert handler.ready()["held_out_batches"] == 2
    empty = handler.handle("evaluate", {"version": 1}, CTX)
    assert empty["version"] == 0 and math.isnan(empty["loss"])
    handler.load_weights(5, {k: v.clone() for k, v in trained.state_dict().items()})
    first = handler.handle("evaluate", {"version": 5}, CTX)
    again = handler.handle("evaluate", {"version": 5}, CTX)
    assert first["version"] == 5 and math.isfinite(first["loss"]) and first == again


def test_evaluator_scores_the_newest_weights():
    handler, trained = dit_evaluator()
    handler.load_weights(1, {k: v.clone() for k, v in trained.state_dict().items()})
    before = handler.handle("evaluate", {"version": 1}, CTX)["loss"]
    scaled = {k: v * 0 for k, v in trained.state_dict().items()}  # a different model
    handler.load_weights(2, scaled)
    after = handler.handle("evaluate", {"version": 2}, CTX)
    assert after["version"] == 2 and after["loss"] != before


def test_evaluator_scores_the_language_model():
    model, data = LMModelConfig(d_model=32, n_layers=1), TextDataConfig(size=64, seq_len=16)
    handler = EvaluatorHandler(asdict(model), asdict(data), batches=1, batch_size=4)
    handler.setup()
    handler.load_weights(3, build(model, data).model.state_dict())
    reply = handler.handle("evaluate", {"version": 3}, CTX)
    assert reply["version"] == 3 and 2.0 < reply["loss"] < 6.0  # about ln(vocab) untrained


def test_stage_service_serves_the_configured_stage():
    from driver.aux.services.stage import StageService

    handler = StageService("driver.aux.services.stage:RandomFlip", {"p": 1.0})
    handler.setup()
    image = np.arange(12, dtype=np.float32).reshape(1, 3, 4)
    reply = handler.handle("process", {"sample": image, "ctx": [0, 0, 5, 1]}, CTX)
    assert np.array_equal(reply["sample"], image[..., ::-1]) and handler.ready()


def test_stage_service_refuses_what_is_not_a_stage():
    from driver.aux.services.stage import StageService

    with pytest.raises(TypeError, match="not a driver.data.stages.Stage"):
        StageService("driver.aux.services.encoder:EncoderHandler")


def test_evaluator_scores_an_unconditioned_model_without_embeddings():
    handler, _ = dit_evaluator()
    plain = build(DiTModelConfig(d_model=32, n_layers=1), ImageDataConfig(size=64)).model
    handler.load_weights(1, plain.state_dict())
    reply = handler.handle("evaluate", {"version": 1}, CTX)
    assert reply["version"] == 1 and math.isfinite(reply["loss"])
