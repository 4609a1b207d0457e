"""A DiLoCo learner syncs whole parameters: an FSDP layout is refused at composition, on one
line naming `parallelism.fsdp_size`; DDP replicas and runs that are not learners pass."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from catalog.errors import InputError
from driver.config.checks import check_diloco_layout
from driver.config.compose import compose
from driver.diloco import hook

LEARNER = {"REVE_DILOCO_ADDRESS": "tcp://sync:5555"}
CONFIG = "runs/train/tiny-lm.yaml"


def cfg(fsdp_size: int) -> SimpleNamespace:
    return SimpleNamespace(parallelism=SimpleNamespace(fsdp_size=fsdp_size))


@pytest.mark.parametrize(
    ("fsdp_size", "environ", "refused"),
    [(2, LEARNER, True), (8, LEARNER, True), (1, LEARNER, False), (2, {}, False)],
)
def test_fsdp_learners_are_refused(fsdp_size, environ, refused):
    if not refused:
        check_diloco_layout(cfg(fsdp_size), "x.yaml", environ)
        return
    with pytest.raises(InputError) as err:
        check_diloco_layout(cfg(fsdp_size), "x.yaml", environ)
    assert (err.value.source, err.value.field) == ("x.yaml", "parallelism.fsdp_size")
    assert f"{fsdp_size}: a DiLoCo learner syncs whole parameters" in err.value.line()


def test_composition_refuses_an_fsdp_learner(monkeypatch):
    monkeypatch.setenv("REVE_DILOCO_ADDRESS", "tcp://sync:5555")
    overrides = ["parallelism.fsdp_size=2", "parallelism.replica_group_size=2"]
    with pytest.raises(InputError) as err:
        compose(CONFIG, overrides)
    assert err.value.field == "parallelism.fsdp_size"
    compose(CONFIG, [])  # DDP replicas: fine
    monkeypatch.delenv("REVE_DILOCO_ADDRESS")
    compose(CONFIG, overrides)  # not a learner: fine


def test_the_hook_refuses_sharded_parameters(monkeypatch):
    class DTensor(torch.nn.Parameter):  # what FSDP2 makes of a parameter, by type name
        pass

    model = torch.nn.Linear(2, 2)
    model.weight = DTensor(model.weight.detach())
    monkeypatch.setattr(hook, "config", lambda environ=None: object())
    with pytest.raises(InputError, match="FSDP-sharded ones are not supported"):
        hook.prepare(model)
