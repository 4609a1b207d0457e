"""Determinism across upgrades: histories the periodic workflows wrote before
`warden.loops.periodic` replay on today's workflows (tests/warden/histories/record.py
recorded them: a failed and reported round, a continue-as-new, a completion), their
payloads decoded with today's `warden.model`. No server."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from warden import model
from warden.faults import FaultInterceptor
from warden.worker import WORKFLOWS

HISTORIES = Path(__file__).resolve().parent / "histories"


@pytest.mark.parametrize("name", sorted(p.stem for p in HISTORIES.glob("*.json")))
def test_recorded_history_replays(name):
    history = WorkflowHistory.from_json(name, (HISTORIES / f"{name}.json").read_text())
    replayer = Replayer(workflows=WORKFLOWS, interceptors=[FaultInterceptor()])
    result = asyncio.run(replayer.replay_workflow(history, raise_on_replay_failure=False))
    assert result.replay_failure is None, result.replay_failure


def test_message_annotations_are_types_not_strings():
    """The sandbox cannot resolve a string annotation of a class in a submodule of
    warden.model (warden/model/__init__.py): every field's annotation is a type."""
    for name in model.__all__:
        cls = getattr(model, name)
        if dataclasses.is_dataclass(cls):
            strings = [f.name for f in dataclasses.fields(cls) if isinstance(f.type, str)]
            assert not strings, f"{name}: {strings}"


def test_every_periodic_workflow_has_a_history():
    kinds = {p.stem.rsplit("-", 1)[0] for p in HISTORIES.glob("*.json")}
    assert kinds == {"sweep", "keep", "stragglers"}
