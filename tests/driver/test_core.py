"""One optimizer step of the plain stepper, in process (no Ray): gradient accumulation over
micro-batch slots, clipping, the learning rate it reports, bf16 autocast only on GPU (or
when asked), and the same samples whatever the micro-batch size (driver.data.slots)."""

from __future__ import annotations

import warnings

import pytest
import torch

from driver import optim
from driver.config.compose import compose
from driver.data.feed import Feed
from driver.trainer.core import StepCore
from driver.trainer.plain import PlainStepper
from driver.workloads import build
from tests.driver.conftest import TINY_LM


def make(overrides: list[str], device: str = "cpu", sgd: bool = False):
    cfg, _ = compose(TINY_LM, ["data.size=64", "model.n_layers=1", *overrides])
    torch.manual_seed(0)
    work = build(cfg.model, cfg.data)
    if sgd:  # plain SGD: the parameter change is lr times the (clipped) gradient
        opt = torch.optim.SGD(work.model.parameters(), lr=1.0)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
    else:
        opt, sched = optim.build(work.model, cfg.optimizer, cfg.train.steps)
    accum = cfg.train.grad_accum_steps
    feed = Feed(work.dataset, cfg.train.micro_batch_size, accum, cfg.train.seed, grad_accum=accum)
    core = StepCore(cfg, work.model, work, opt, sched, torch.device(device), feed)
    return PlainStepper(core, 0, accum, slots=accum), work


def params(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten().clone() for p in model.parameters()])


def test_accumulating_two_halves_equals_one_whole_batch():
    whole, work = make(["train.micro_batch_size=8", "train.max_grad_norm=0"], sgd=True)
    halves, work2 = make(
        ["train.micro_batch_size=4", "train.grad_accum_steps=2", "train.max_grad_norm=0"], sgd=True
    )
    before = params(whole.core.model)
    row1, row2 = whole.run(), halves.run()
    assert torch.allclose(params(whole.core.model), params(halves.core.model), atol=1e-6)
    assert not torch.allclose(params(whole.core.model), before)
    assert row1["loss"] == pytest.approx(row2["loss"], rel=1e-5)
    assert row2["tokens_per_s"] > 0 and row2["step_time"] > 0


def test_clipping_bounds_the_update():
    stepper, _ = make(["train.micro_batch_size=4", "train.max_grad_norm=0.01"], sgd=True)
    before = params(stepper.core.model)
    row = stepper.run()
    assert row["grad_norm"] > 0.01  # the norm before clipping is reported
    change = torch.linalg.vector_norm(params(stepper.core.model) - before)
    assert change == pytest.approx(0.01, rel=1e-3)


def test_reported_lr_follows_the_schedule():
    stepper, _ = make(["train.steps=10", "optimizer.warmup_steps=4", "optimizer.lr=1e-3"])
    lrs = [stepper.run()["lr"] for step in range(3)]
    assert lrs == pytest.approx([2.5e-4, 5e-4, 7.5e-4]) and stepper.step == 3


@pytest.mark.parametrize(
    ("precision", "device", "bf16"),
    [("auto", "cpu", False), ("fp32", "cpu", False), ("bf16", "cpu", True),
     ("auto", "cuda", True), ("fp32", "cuda", False)],
)  # fmt: skip
def test_bf16_autocast_only_on_gpu_or_when_asked(precision, device, bf16):
    stepper, _ = make([f"train.precision={precision}"], device=device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no CUDA here: torch warns and disables it
        context = stepper.core.autocast()
    assert isinstance(context, torch.autocast) == bf16
    if bf16:
        assert context.fast_dtype == torch.bfloat16
    if device == "cpu":
        with context:
            dtype = (torch.ones(2, 2) @ torch.ones(2, 2)).dtype
        assert dtype == (torch.bfloat16 if bf16 else torch.float32)
