"""`python -m driver.diloco.local --plan` (what `runner run --local` runs on an experiment):
each learner's lines shown with its name, its environment, the local synchronizer's
address and the keys folder added to its command as `diloco.*` overrides, a failed
learner named on one line, Ctrl-C stopping every
process. The learners here are small Python programs (the driver's run is
tests/runner/test_experiment_cli.py, slow)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from driver.diloco.children import Children
from tests.support.signals import describe_tree, kill_tree

ROOT = Path(__file__).resolve().parents[2]

SHOW = (
    "import os, sys; words = dict(w.split('=', 1) for w in sys.argv[1:]); "
    "print('address', words['diloco.address']); "
    "print('keys', os.path.isdir(words['diloco.keys'])); "
    "print('learner', os.environ['LEARNER_NAME'])"
)


def write_plan(tmp_path: Path, programs: dict[str, str]) -> Path:
    plan = {
        "out": str(tmp_path / "out"),
        "synchronizer": ["--round-timeout", "5", "--compression", "fp32"],
        "learners": [
            {"name": n, "command": [sys.executable, "-c", p], "env": {"LEARNER_NAME": n}}
            for n, p in programs.items()
        ],
    }
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    return path


def run_plan(path: Path, **kw) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "driver.diloco.local", "--plan", str(path)]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **kw)  # fmt: skip


def test_learners_lines_are_prefixed_and_a_failed_one_is_named(tmp_path):
    proc = run_plan(write_plan(tmp_path, {"us": SHOW, "eu": "raise SystemExit(3)"}))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, out + err
    lines = out.splitlines()
    address = next(ln for ln in lines if ln.startswith("synchronizer on ")).split()[2]
    address = address.rstrip(";")
    assert address.startswith("tcp://127.0.0.1:") and f"[us] address {address}" in lines
    assert "[us] keys True" in lines and "[us] learner us" in lines
    assert any(ln.startswith("[sync] ") and "listening on" in ln for ln in lines), out
    assert err.strip().splitlines() == ["error: learner eu (exit 3, see its [eu] lines) failed"]
    assert "listening on" in (tmp_path / "out" / "synchronizer.log").read_text()


def test_a_plan_that_is_not_one_is_one_line(tmp_path):
    (tmp_path / "plan.json").write_text("{}")
    proc = run_plan(tmp_path / "plan.json")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and len(err.strip().splitlines()) == 1, err
    assert "not a plan of runner run --local" in err


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def two_sleepers(tmp_path: Path) -> subprocess.Popen:
    """A local run (a session of its own) of two learners that sleep, once both started
    (each writes a file named by its pid)."""
    where = str(tmp_path)
    sleeper = f"import os, time; open({where!r} + f'/{{os.getpid()}}', 'w'); time.sleep(300)"
    proc = run_plan(write_plan(tmp_path, {"us": sleeper, "eu": sleeper}), start_new_session=True)
    deadline = time.time() + 120
    while len([p for p in tmp_path.iterdir() if p.name.isdigit()]) < 2:
        assert time.time() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    return proc


def communicate_or_describe(proc: subprocess.Popen, sent: str) -> tuple[str, str]:
    """Its output once it ended; if it has not within 120 s, fail with every process of
    the tree and its signal masks (and kill them: none is left for later tests)."""
    try:
        return proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        tree = describe_tree(proc.pid)
        kill_tree(proc.pid)
        out, err = proc.communicate(timeout=30)
        pytest.fail(f"still running 120 s after {sent}:\n{tree}\n{out}{err}")


def test_ctrl_c_stops_every_process(tmp_path):
    proc = two_sleepers(tmp_path)
    os.killpg(proc.pid, signal.SIGINT)  # the terminal's Ctrl-C reaches the whole group
    out, err = communicate_or_describe(proc, "SIGINT to its group")
    assert proc.returncode == 130, out + err
    assert out.splitlines()[-1] == "stopped"
    pids = [int(p.name) for p in tmp_path.iterdir() if p.name.isdigit()]
    assert not any(alive(pid) for pid in pids)
    assert not with_argument(str(tmp_path / "out" / "keys"))  # the synchronizer's


def with_argument(word: str) -> list[int]:
    """The live processes with `word` among their arguments."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and word in (entry / "cmdline").read_bytes().decode():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


IGNORES_ONE = (
    "import signal, sys, time; hits = []\n"
    "def on_int(*_):\n"
    "    hits.append(1)\n"
    "    if len(hits) > 1: sys.exit(7)\n"
    "signal.signal(signal.SIGINT, on_int); print('ready', flush=True)\n"
    "while True: time.sleep(0.05)\n"
)


def test_a_process_left_after_the_grace_gets_sigint_again(capsys):
    """A learner that does not stop at the first Ctrl-C (one waiting at a barrier for a
    learner that already stopped) gets a second SIGINT after the grace period."""
    children = Children()
    proc = children.start("slow", [sys.executable, "-c", IGNORES_ONE], dict(os.environ))
    seen, deadline = "", time.time() + 60
    while "[slow] ready" not in seen and time.time() < deadline:
        seen += capsys.readouterr().out
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)  # the first Ctrl-C
    codes = children.end(["slow"], grace_s=0.5)
    children.join()
    assert codes == {"slow": 7}
    assert "still running after Ctrl-C: slow; stopping at once" in capsys.readouterr().out


def test_sigterm_is_handed_to_every_learner(tmp_path):
    """`runner run` hands a SIGTERM (a preemption notice) to `driver.diloco.local`, which
    hands it to each learner (a driver saves a final checkpoint) and exits 143."""
    proc = two_sleepers(tmp_path)
    proc.terminate()  # to it alone, not its group
    out, err = communicate_or_describe(proc, "SIGTERM")
    assert proc.returncode == 143, out + err
    pids = [int(p.name) for p in tmp_path.iterdir() if p.name.isdigit()]
    assert not any(alive(pid) for pid in pids)
    assert not with_argument(str(tmp_path / "out" / "keys"))


def test_nothing_outlives_a_killed_local_run(tmp_path):
    proc = two_sleepers(tmp_path)
    proc.kill()
    proc.communicate(timeout=60)
    pids = [int(p.name) for p in tmp_path.iterdir() if p.name.isdigit()]
    deadline = time.time() + 30
    while any(alive(pid) for pid in pids) or with_argument(str(tmp_path / "out" / "keys")):
        assert time.time() < deadline, "a learner or the synchronizer outlived the local run"
        time.sleep(0.2)
