"""Authenticated checkpoints: a planted, copied or foreign step is never loaded, and the
checkpoint's own entries are plain data (nothing in a checkpoint can run code on load)."""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
import stat
from pathlib import Path

import pytest
import torch

from driver.checkpoint import CheckpointError
from driver.checkpoint.auth import (
    KEY_ENV,
    MissingKey,
    load_secret,
    local_key_file,
    marker_problem,
    sign,
)
from driver.checkpoint.layout import MARKER, Marker
from driver.checkpoint.plain import decode_state, encode_state, restore_rng, rng_blob
from driver.checkpoint.planner import PlainLoadPlanner
from tests.checkpoint.toy import config, make_state, train


class Planted:
    """Unpickling this creates a file: the proof that a load ran code."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (os.mkdir, (self.path,))


@pytest.fixture
def run(root, checkpointers):
    """A run with committed checkpoints at steps 3 and 6; returns its folder."""
    ckpt = checkpointers(config(root, keep_last=2), "team", "run")
    train(make_state(), ckpt, 1, 6)
    ckpt.wait()
    return Path(root, "team", "run")


def plant(run: Path, step: int, secret: bytes | None, team="team", name="run") -> Path:
    """Copy step-6 to step-<step> with a marker for that step, signed with `secret`."""
    target = run / f"step-{step}"
    shutil.copytree(run / "step-6", target)
    marker = Marker.loads((target / MARKER).read_text())
    forged = Marker(step, marker.world_size, marker.files, 0.1, 0.0, team, name, marker.digests)
    forged = sign(forged, secret) if secret is not None else forged
    (target / MARKER).write_text(forged.dumps())
    return target


@pytest.mark.parametrize(
    ("secret", "team", "name", "why"),
    [
        (None, "team", "run", "not signed with this run's checkpoint key"),
        (b"another team's secret", "team", "run", "not signed with this run's checkpoint key"),
        ("own", "team", "other-run", "belongs to team/other-run, not team/run"),
    ],
)
def test_a_planted_step_is_ignored_and_refused(
    run, root, checkpointers, caplog, secret, team, name, why
):
    key = load_secret() if secret == "own" else secret
    planted = plant(run, 99, key, team, name)
    ckpt = checkpointers(config(root, keep_last=2), "team", "run")
    assert ckpt.latest().step == 6  # not the planted step 99
    state = make_state()
    assert ckpt.resume(state).step == 6
    with pytest.raises(CheckpointError) as err:
        ckpt.load(make_state(), str(planted))
    assert f"is not authentic: its {'marker belongs' if 'belongs' in why else 'commit'}" in str(
        err.value
    )
    assert why in str(err.value) and "\n" not in str(err.value)
    train(state, ckpt, 7, 9)  # retention keeps the newest two real ones and leaves it alone
    ckpt.wait()
    assert planted.exists() and sorted(ckpt.storage.step_dirs()) == [6, 9]
    assert "ignoring checkpoint" in caplog.text


def test_a_marker_copied_to_another_run_is_refused(run, root, checkpointers):
    other = Path(root, "team", "copy")
    shutil.copytree(run, other)
    ckpt = checkpointers(config(root), "team", "copy")
    assert ckpt.latest() is None
    with pytest.raises(CheckpointError, match="belongs to team/run, not team/copy"):
        ckpt.load(make_state(), str(other / "step-6"))


def test_a_planted_metadata_pickle_never_runs(run, root, checkpointers, tmp_path):
    proof = tmp_path / "ran"
    step = run / "step-6"
    size = (step / ".metadata").stat().st_size
    evil = pickle.dumps(Planted(str(proof)))
    (step / ".metadata").write_bytes(evil.ljust(size, b"\0")[: max(size, len(evil))])
    ckpt = checkpointers(config(root), "team", "run")
    with pytest.raises(CheckpointError, match=".metadata changed after the commit"):
        ckpt.load(make_state(), str(step))
    assert not proof.exists()


def test_non_tensor_entries_load_weights_only(tmp_path):
    proof = tmp_path / "ran"
    buffer = io.BytesIO()
    torch.save({"extra": Planted(str(proof))}, buffer)
    buffer.seek(0)
    planner = PlainLoadPlanner()
    with pytest.raises(pickle.UnpicklingError):
        planner.load_bytes(None, buffer)
    assert not proof.exists()


def test_rng_and_loader_state_are_json(run):
    import random

    import numpy as np

    blob = rng_blob()
    assert json.loads(blob)["python"]["version"] == 3
    first = (torch.rand(3), np.random.rand(3), random.random())
    restore_rng(blob)
    assert torch.equal(torch.rand(3), first[0])
    assert (np.random.rand(3) == first[1]).all() and random.random() == first[2]
    state = {"epoch": np.int64(2), "in_flight": np.arange(3), "digest": "ab"}
    assert decode_state(encode_state(state)) == {"epoch": 2, "in_flight": [0, 1, 2], "digest": "ab"}
    with pytest.raises(TypeError, match="not plain data"):
        encode_state({"x": object()})


def test_local_key_is_private_and_stable(monkeypatch):
    first = load_secret()
    assert first == load_secret() and len(first) == 64
    assert stat.S_IMODE(local_key_file().stat().st_mode) == 0o600
    monkeypatch.setenv(KEY_ENV, "from-the-secret")
    assert load_secret(required=True) == b"from-the-secret"
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(MissingKey, match=f"{KEY_ENV} is not set"):
        load_secret(required=True)


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({}, None),
        ({"step": 7}, "not signed"),
        ({"files": {"a": 2}}, "not signed"),
        ({"digests": {".metadata": "00"}}, "not signed"),
        ({"mac": ""}, "not signed"),
        ({"run": "b"}, "belongs to t/b"),
    ],
)
def test_marker_problem(change, problem):
    import dataclasses

    signed = sign(Marker(3, 2, {"a": 1}, 0.5, 1.0, "t", "r", {".metadata": "ff"}), b"k")
    found = marker_problem(dataclasses.replace(signed, **change), b"k", "t", "r")
    assert (found is None) if problem is None else (problem in found)
