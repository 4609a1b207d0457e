"""ft + DiLoCo: a learner that is a torchft run (`ft=on`, two replica groups of one worker)
against a synchronizer process. The lowest live group talks to the synchronizer; every
merge rides on a step's commit vote, so the groups apply it together. The group that
talks is SIGKILLed while the groups wait for a merge: the run goes on, the other group
sends the push again and takes the merge at the same step, every step is committed once,
the replacement heals the learner's state and talks again, and the loss curve is the
failure-free run's."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from driver.diloco import keys, local, state

ROOT = Path(__file__).resolve().parents[2]
STEPS, H = 100, 5
"""Steps enough for the killed group's replacement to come back, heal and talk again."""
WAIT_S = 10.0
"""How long the first round waits for the learner that never comes."""


def connected_to(port: int) -> set[int]:
    """The processes with a TCP connection to `port` (on this machine's network)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[2].rsplit(":", 1)[1], 16) == port and fields[3] == "01":
                inodes.add(fields[9])
    pids = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            links = {os.readlink(fd) for fd in (proc / "fd").iterdir()}
        except OSError:  # gone, or not ours
            continue
        if any(f"socket:[{inode}]" in links for inode in inodes):
            pids.add(int(proc.name))
    return pids


def rows_of(folder: Path) -> list[dict]:
    path = folder / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def learner_run(tmp_path: Path, name: str, kill: bool = False):
    """The driver (`ft=on`, 2 workers) as learner `a` of a synchronizer of its own, whose
    first round waits WAIT_S for a second learner that never comes (so the groups wait
    inside step H + 1 for the merge). With `kill`, the process talking to the synchronizer
    is SIGKILLed while they wait. (metrics rows, rounds, the killed pid)."""
    out = tmp_path / name
    out.mkdir()
    keys.generate(out / "keys", ["a"])
    sync, address = local.start_synchronizer(
        out, ["--expect", "a,b", "--round-timeout", str(WAIT_S)]
    )
    args = ["runs/train/tiny-lm.yaml", "ft=on", f"train.steps={STEPS}", "parallelism.workers=2",
            "optimizer.warmup_steps=2", "data.size=1024", "logging.format=json",
            f"run.output_dir={out / 'run'}", f"run.name={name}",
            f"checkpoint.root={out / 'ckpt'}", "checkpoint.interval_steps=10",
            f"diloco.address={address}", "diloco.learner=a", f"diloco.keys={out / 'keys'}",
            f"diloco.sync_every={H}", "diloco.barrier_timeout_s=60"]  # fmt: skip
    log = open(out / "driver.log", "w")  # noqa: SIM115
    driver = subprocess.Popen([sys.executable, "-m", "driver.train", *args], cwd=ROOT,
                              stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    killed = None
    try:
        if kill:
            deadline = time.time() + 400
            while not any(r["step"] >= H for r in rows_of(out / "run")):
                assert driver.poll() is None and time.time() < deadline, "no sync point"
                time.sleep(0.05)
            talkers = connected_to(int(address.rsplit(":", 1)[1]))
            assert len(talkers) == 1, talkers  # one group talks to the synchronizer
            killed = talkers.pop()
            os.kill(killed, signal.SIGKILL)
            assert not state.read_rounds(out / "state")  # its push was waiting to merge
        assert driver.wait(500) == 0, (out / "driver.log").read_text()[-4000:]
    finally:
        if driver.poll() is None:
            driver.kill()
        sync.terminate()
        sync.wait(30)
    return rows_of(out / "run"), state.read_rounds(out / "state"), killed


@pytest.mark.slow
def test_an_ft_learner_keeps_syncing_through_the_loss_of_the_group_that_talks(tmp_path):
    clean, clean_rounds, _ = learner_run(tmp_path, "clean")
    rows, rounds, killed = learner_run(tmp_path, "killed", kill=True)
    assert killed is not None
    # the survivor sent the push again and took the merge at the same step, alone
    after = rows[H]
    assert after["ft_quorum_size"] == 1 and after["diloco_round"] == 1 == clean[H]["diloco_round"]
    for run in (clean, rows):
        assert [r["step"] for r in run] == list(range(1, STEPS + 1))  # none lost, none twice
        assert all(math.isfinite(r["loss"]) for r in run)
    assert rows[-1]["ft_failures_survived"] == 1 and clean[-1]["ft_failures_survived"] == 0
    # every sync point merged once, the learner alone: through the loss too
    for merged in (clean_rounds, rounds):
        assert [r["round"] for r in merged] == list(range(1, STEPS // H + 1))
        assert all(r["contributors"] == ["a"] for r in merged)
    # the replacement healed (the learner's state with the model's) and took over again
    back = [r for r in rows if r["rank"] == 0 and r["ft_quorum_size"] == 2 and r["ft_heals"]]
    assert back and back[0]["diloco_round"] == clean[back[0]["step"] - 1]["diloco_round"]
    # each merge is applied by every group at the step after its sync point
    assert [r["diloco_round"] for r in clean] == [r["diloco_round"] for r in rows]
    assert {r["diloco_round"] for r in rows if r["step"] % H == 1 and r["step"] > 1} == set(
        range(1, STEPS // H)
    )
    # the groups kept equal weights: the failure-free run's losses (ft.constant_batch)
    for a, b in zip(clean, rows, strict=True):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4), a["step"]
