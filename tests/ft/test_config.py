"""FtConfig: one-line errors naming the field, and the layouts torchft runs here."""

from __future__ import annotations

import pytest

from catalog.errors import InputError
from driver.config.ft import FtConfig


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"min_replicas": 0}, "ft.min_replicas"),
        ({"heartbeat_timeout_ms": 0}, "ft.heartbeat_timeout_ms"),
        ({"heartbeat_interval_ms": 500, "heartbeat_timeout_ms": 500}, "ft.heartbeat_interval_ms"),
        ({"quorum_timeout_s": -1}, "ft.quorum_timeout_s"),
        ({"lr_scaling": "sqrt"}, "ft.lr_scaling"),
        ({"bogus": 1}, "ft.bogus"),
    ],
)
def test_bad_values_name_the_field(data, field):
    with pytest.raises(InputError) as err:
        FtConfig.from_dict(data, "run.yaml")
    assert err.value.field == field
    assert "\n" not in str(err.value) and str(err.value).startswith(f"run.yaml: {field}: ")


@pytest.mark.parametrize(
    ("fsdp", "group", "world", "field"),
    [
        (1, None, 4, None),
        (1, 1, 4, None),
        (2, 2, 4, None),  # 2 groups of 2 workers, FSDP inside: min_replicas 2 met
        (1, 2, 4, None),  # DDP inside a group
        (2, 4, 4, "ft.min_replicas"),  # 1 group of 4: fewer than 2
        (1, None, 1, "ft.min_replicas"),
    ],
)
def test_layouts(fsdp, group, world, field):
    cfg = FtConfig(enabled=True, min_replicas=2)
    if field is None:
        cfg.check_layout(fsdp, group, world, "run.yaml")
        return
    with pytest.raises(InputError) as err:
        cfg.check_layout(fsdp, group, world, "run.yaml")
    assert err.value.field == field


def test_off_accepts_any_layout():
    FtConfig(enabled=False, min_replicas=8).check_layout(4, 8, 8)
