"""One optimizer step of the training loop, in process (no Ray): gradient accumulation,
clipping, the learning rate it reports, and bf16 autocast only on GPU (or when asked)."""

from __future__ import annotations

import warnings

import pytest
import torch

from driver import optim
from driver.batches import collate
from driver.config.compose import compose
from driver.step import Loop
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
    return Loop(cfg, work.model, work, opt, sched, torch.device(device), 1), work


def examples(work, count: int):
    return collate([work.dataset[i] for i in range(count)])


def params(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten().clone() for p in model.parameters()])


def test_accumulating_two_halves_equals_one_whole_batch():
    whole, work = make(["train.micro_batch_size=8", "train.max_grad_norm=0"], sgd=True)
    halves, work2 = make(
        ["train.micro_batch_size=4", "train.grad_accum_steps=2", "train.max_grad_norm=0"], sgd=True
    )
    x, y = examples(work, 8)
    before = params(whole.model)
    row1 = whole.step(0, iter([(x, y)]))
    row2 = halves.step(0, iter([(x[:4], y[:4]), (x[4:], y[4:])]))
    assert torch.allclose(params(whole.model), params(halves.model), atol=1e-6)
    assert not torch.allclose(params(whole.model), before)
    assert row1["loss"] == pytest.approx(row2["loss"], rel=1e-5)
    assert row2["tokens_per_s"] > 0 and row2["step_time"] > 0


def test_clipping_bounds_the_update():
    loop, work = make(["train.micro_batch_size=4", "train.max_grad_norm=0.01"], sgd=True)
    before = params(loop.model)
    row = loop.step(0, iter([examples(work, 4)]))
    assert row["grad_norm"] > 0.01  # the norm before clipping is reported
    assert torch.linalg.vector_norm(params(loop.model) - before) == pytest.approx(0.01, rel=1e-3)


def test_reported_lr_follows_the_schedule():
    loop, work = make(["train.steps=10", "optimizer.warmup_steps=4", "optimizer.lr=1e-3"])
    batch = examples(work, 16)
    lrs = [loop.step(step, iter([batch]))["lr"] for step in range(3)]
    assert lrs == pytest.approx([2.5e-4, 5e-4, 7.5e-4])


@pytest.mark.parametrize(
    ("precision", "device", "bf16"),
    [("auto", "cpu", False), ("fp32", "cpu", False), ("bf16", "cpu", True),
     ("auto", "cuda", True), ("fp32", "cuda", False)],
)  # fmt: skip
def test_bf16_autocast_only_on_gpu_or_when_asked(precision, device, bf16):
    loop, _ = make([f"train.precision={precision}"], device=device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no CUDA here: torch warns and disables it
        context = loop.autocast()
    assert isinstance(context, torch.autocast) == bf16
    if bf16:
        assert context.fast_dtype == torch.bfloat16
    if device == "cpu":
        with context:
            dtype = (torch.ones(2, 2) @ torch.ones(2, 2)).dtype
        assert dtype == (torch.bfloat16 if bf16 else torch.float32)
