"""Every bad value of a driver config is one line naming the key, at composition (before Ray)."""

from __future__ import annotations

import math

import pytest

from catalog.errors import InputError
from driver.config.checks import check_name, float_problem
from driver.config.compose import compose

TINY_LM = "runs/train/tiny-lm.yaml"
TINY_DIT = "runs/train/tiny-dit.yaml"


@pytest.mark.parametrize(
    ("config", "override", "field", "message"),
    [
        (TINY_LM, "model.n_heads=0", "model.n_heads", "must be at least 1"),
        (TINY_LM, "model.d_model=-4", "model.d_model", "must be at least 1"),
        (TINY_LM, "model.n_layers=0", "model.n_layers", "must be at least 1"),
        (TINY_LM, "data.seq_len=0", "data.seq_len", "must be at least 1"),
        (TINY_DIT, "model.patch_size=0", "model.patch_size", "must be at least 1"),
        (TINY_DIT, "data.channels=0", "data.channels", "must be at least 1"),
        (TINY_LM, "optimizer.lr=-1e-3", "optimizer.lr", "greater than 0"),
        (TINY_LM, "optimizer.lr=0", "optimizer.lr", "greater than 0"),
        (TINY_LM, "optimizer.lr=nan", "optimizer.lr", "finite"),
        (TINY_LM, "optimizer.lr=inf", "optimizer.lr", "finite"),
        (TINY_LM, "optimizer.eps=0", "optimizer.eps", "greater than 0"),
        (TINY_LM, "optimizer.eps=-inf", "optimizer.eps", "finite"),
        (TINY_LM, "optimizer.weight_decay=-0.1", "optimizer.weight_decay", "at least 0"),
        (TINY_LM, "optimizer.min_lr_ratio=1.5", "optimizer.min_lr_ratio", "at most 1"),
        (TINY_LM, "optimizer.betas=[0.9]", "optimizer.betas", "needs 2 values, not 1"),
        (TINY_LM, "optimizer.betas=[0.9,0.95,0.99]", "optimizer.betas", "not 3"),
        (TINY_LM, "optimizer.betas=[0.9,1.0]", "optimizer.betas[1]", "in [0, 1)"),
        (TINY_LM, "optimizer.betas=[-0.1,0.9]", "optimizer.betas[0]", "in [0, 1)"),
        (TINY_LM, "train.max_grad_norm=-1", "train.max_grad_norm", "at least 0"),
        (TINY_LM, "parallelism.cpus_per_worker=0", "parallelism.cpus_per_worker", "greater"),
        (TINY_LM, "run.local_cpus=-2", "run.local_cpus", "must not be negative"),
        (TINY_LM, "logging.tail_lines=-1", "logging.tail_lines", "must not be negative"),
        (TINY_LM, "run.name=../x", "run.name", "is not a safe name"),
        (TINY_LM, "run.name=Big", "run.name", "is not a safe name"),
        (TINY_LM, "run.name=''", "run.name", "is not a safe name"),
        (TINY_LM, "run.team=a/b", "run.team", "is not a safe name"),
        (TINY_LM, "run.cluster=x_y", "run.cluster", "is not a safe name"),
        (TINY_LM, "data.loader=dataloader", "data.loader", "is not one of auto"),
        (TINY_LM, "data.producers=0", "data.producers", "must be at least 1"),
        (TINY_LM, "data.collators=0", "data.collators", "must be at least 1"),
        (TINY_LM, "data.prefetch_batches=1", "data.prefetch_batches", "must be at least 2"),
        (TINY_LM, "data.work_queue_size=0", "data.work_queue_size", "must be at least 1"),
        (TINY_LM, "debug.hold_start_s=-1", "debug.hold_start_s", "at least 0"),
        (TINY_LM, "debug.hold_replacement_s=nan", "debug.hold_replacement_s", "finite"),
        (TINY_LM, "debug.slow_save_s=-0.5", "debug.slow_save_s", "at least 0"),
        (
            TINY_LM,
            "debug.flight_recorder_entries=-1",
            "debug.flight_recorder_entries",
            "must not be negative",
        ),
    ],
)
def test_bad_value_is_one_line_before_ray(config, override, field, message):
    with pytest.raises(InputError) as caught:
        compose(config, [override])
    assert caught.value.field == field
    assert message in caught.value.message
    assert caught.value.source == config
    assert "\n" not in caught.value.line() and len(caught.value.line()) < 300


@pytest.mark.parametrize(
    "override",
    [
        "run.name=my-run-2",
        "optimizer.weight_decay=0",
        "optimizer.betas=[0.0,0.999]",
        "train.max_grad_norm=0",
        "data.loader=pipeline",
        "data.producers=3",
        "debug.hold_start_s=0",
        "debug.slow_save_s=2.5",
    ],
)
def test_good_values_compose(override):
    compose(TINY_LM, [override])


@pytest.mark.parametrize(
    ("value", "low", "high", "closed", "problem"),
    [
        (1.0, 0.0, math.inf, False, None),
        (0.0, 0.0, math.inf, True, None),
        (0.0, 0.0, math.inf, False, "must be greater than 0"),
        (-1.0, 0.0, math.inf, True, "must be at least 0"),
        (2.0, 0.0, 1.0, True, "must be at most 1"),
        (math.nan, 0.0, 1.0, True, "must be a finite number, not nan"),
        (-math.inf, 0.0, 1.0, True, "must be a finite number, not -inf"),
    ],
)
def test_float_problem(value, low, high, closed, problem):
    assert float_problem(value, low, high, closed) == problem


def test_long_name_is_shortened_in_the_error():
    with pytest.raises(InputError) as caught:
        check_name("run.name", "x" * 5000, "f.yaml")
    assert len(caught.value.line()) < 120
