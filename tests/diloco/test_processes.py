"""Synchronizer and learners as real processes on loopback (python -m driver.diloco.*):
the merged weights, both modes converging on the reference LM, a synchronizer killed and
restarted mid-run, a learner killed, an unknown key refused."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from driver.diloco import keys, local, state
from tests import support
from tests.diloco.conftest import in_threads, learner, linear
from tests.diloco.test_sync import LR, MU, flat, one_round
from tests.support.diloco_local import learner_cmd, learner_names

TINY = ["--d-model", "32", "--layers", "1", "--batch", "8", "--seq-len", "32"]


@pytest.fixture
def out(tmp_path, keys_dir):
    shutil.copytree(keys_dir, tmp_path / "keys")
    keys.generate(tmp_path / "keys", learner_names(3))
    return tmp_path


def stop(*procs: subprocess.Popen) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)


def learners(out: Path, address: str, names: list[str], extra: list[str]) -> list[subprocess.Popen]:
    return [subprocess.Popen(learner_cmd(n, i, len(names), address, out, [*TINY, *extra]),
                             env=support.env())
            for i, n in enumerate(names)]  # fmt: skip


def wait_for(check, timeout: float = 240.0) -> None:
    deadline = time.time() + timeout
    while not check():
        assert time.time() < deadline, "timed out"
        time.sleep(0.1)


def summary(out: Path, name: str) -> dict:
    return json.loads((out / f"{name}.json").read_text())


def test_process_synchronizer_merges_the_hand_computed_step_and_refuses_unknown_keys(out, tmp_path):
    sync, address = local.start_synchronizer(out, ["--outer-lr", str(LR), "--outer-momentum",
                                                   str(MU), "--compression", "fp32"])  # fmt: skip
    ls = []
    try:
        models = [linear(0), linear(0)]
        ls += [learner(address, str(out / "keys"), n) for n in "ab"]
        in_threads(*[lambda ln=ln, m=m: ln.start(m) for ln, m in zip(ls, models, strict=True)])
        w = flat(models[0])
        moves = [np.full(w.shape, 0.01, np.float32), np.full(w.shape, -0.03, np.float32)]
        one_round(ls, models, moves, 0)
        g = np.mean([-m for m in moves], axis=0)
        np.testing.assert_allclose(flat(models[1]), w - LR * (g + MU * g), rtol=1e-5, atol=1e-6)
        rogue = keys.generate(tmp_path / "rogue", ["a"])
        shutil.copy(out / "keys" / "synchronizer.key", rogue / "synchronizer.key")
        ls.append(learner(address, str(rogue), "a", join_timeout_s=1.0))  # an intruder
        ls[-1].start(linear(1))
        assert ls[-1].round == -1  # no answer
        wait_for(lambda: "unknown Curve key" in (out / "synchronizer.log").read_text(), 60)
    finally:
        for ln in ls:  # however the test ends: no connection left to the garbage collector
            ln.close()
        stop(sync)


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "fragments"), [("barrier", 1), ("decoupled", 1), ("barrier", 2)])
def test_both_modes_and_streaming_converge_on_the_reference_lm(out, mode, fragments):
    names = learner_names(2)
    sync, address = local.start_synchronizer(
        out, ["--expect", ",".join(names), "--round-timeout", "10"]
    )
    extra = ["--steps", "60", "--sync-every", "10", "--mode", mode, "--fragments", str(fragments)]
    procs = learners(out, address, names, extra)
    try:
        assert [p.wait(300) for p in procs] == [0, 0]
    finally:
        stop(*procs, sync)
    results = [summary(out, n) for n in names]
    for r in results:
        assert r["final_eval"] < 3.2, r  # from ln(63) = 4.14
        # barrier: a round every H steps; decoupled: rounds in flight are not waited for
        assert r["round"] >= (5 if mode == "barrier" else 1)
        assert any(m["kind"] == "delta" for m in r["merges"])
    if fragments > 1:  # fragment 1 syncs after local steps 5, 15, ... 55 (offset H/2)
        steps = sorted({m["step"] for m in results[0]["merges"] if m["fragment"] == 1})
        assert steps == [-1, 4, 14, 24, 34, 44, 54]  # -1: the join
    elif mode == "barrier":  # the last step was a sync point: everyone holds the shared weights
        a, b = (torch.load(out / f"{n}.pt", weights_only=True) for n in names)
        assert all(torch.allclose(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_synchronizer_killed_mid_run_restarts_and_training_continues(out):
    names = learner_names(2)
    sync, address = local.start_synchronizer(
        out, ["--round-timeout", "30", "--expect", ",".join(names)]
    )
    extra = [
        "--steps",
        "80",
        "--sync-every",
        "10",
        "--step-delay",
        "0.03",
        "--barrier-timeout",
        "3",
    ]
    procs = learners(out, address, names, extra)
    try:
        wait_for(lambda: len(state.read_rounds(out / "state")) >= 2)
        sync.kill()  # mid-run, likely mid-round: the pushes in flight are lost
        sync.wait(30)
        killed_at = state.load(out / "state").round
        time.sleep(1.0)
        sync, _ = local.start_synchronizer(
            out, ["--round-timeout", "30", "--expect", ",".join(names)], bind=address
        )
        assert [p.wait(300) for p in procs] == [0, 0]
    finally:
        stop(*procs, sync)
    log = (out / "synchronizer.log").read_text()
    assert f"resumed at round {killed_at}" in log
    rounds = [r["round"] for r in state.read_rounds(out / "state")]
    assert rounds == list(range(1, len(rounds) + 1))  # no round lost or merged twice
    after = [r for r in state.read_rounds(out / "state") if r["round"] > killed_at]
    assert after, "no round merged after the restart"
    results = [summary(out, n) for n in names]
    assert all(r["steps"] == 80 for r in results)
    assert max(r["round"] for r in results) == rounds[-1]


@pytest.mark.slow
def test_killed_learner_leaves_the_others_training(out):
    names = learner_names(3)
    sync, address = local.start_synchronizer(
        out, ["--round-timeout", "20", "--expect", ",".join(names)]
    )
    procs = learners(
        out, address, names, ["--steps", "60", "--sync-every", "10", "--step-delay", "0.03"]
    )
    try:
        wait_for(lambda: any(len(r["contributors"]) == 3 for r in state.read_rounds(out / "state")))
        procs[2].kill()
        assert [p.wait(300) for p in procs[:2]] == [0, 0]
    finally:
        stop(*procs, sync)
    records = state.read_rounds(out / "state")
    dead = names[2]
    last_with = max(r["round"] for r in records if dead in r["contributors"])
    later = [r for r in records if r["round"] > last_with]
    assert later and all(r["contributors"] == names[:2] for r in later)
    assert dead in later[0]["missing"]
    assert all(summary(out, n)["steps"] == 60 for n in names[:2])


@pytest.mark.slow
def test_local_experiment_entry_point(tmp_path):
    cmd = [sys.executable, "-m", "tests.support.diloco_local", "--learners", "2",
           "--out", str(tmp_path), "--steps", "20", "--sync-every", "10", *TINY]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=support.env())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "rounds merged: 2" in done.stdout and "learner-b: held-out loss" in done.stdout


def test_local_experiment_refuses_bad_options_with_exit_2(tmp_path):
    cmd = [sys.executable, "-m", "tests.support.diloco_local", "--out", str(tmp_path),
           "--steps", "x"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=support.env())
    assert done.returncode == 2 and "--steps" in done.stderr
