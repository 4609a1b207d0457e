"""A full checkpoint disk through the driver: every save fails, each failure shows in the
metrics rows and the summary, and after `checkpoint.max_failed_saves` in a row the run stops
with one line (exit 1); under torchft every replica group stops after the same step (the
writer's failing saves ride on the reduce as the run's stop), not the writer alone. A real
1 MiB tmpfs (needs CAP_SYS_ADMIN; skipped where it cannot be mounted; tests/checkpoint
covers refused writes everywhere with RLIMIT_FSIZE)."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.driver.test_interrupt import output, start_driver


@pytest.fixture
def full_disk(tmp_path):
    mnt = tmp_path / "disk"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)])
    if done.returncode:
        pytest.skip("cannot mount a tmpfs here")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=True)


@pytest.mark.parametrize("ft", ["off", "on"])
def test_saves_failing_on_a_full_disk_stop_the_run_with_one_line(tmp_path, full_disk, ft):
    extra = ["train.steps=400", "checkpoint.interval_steps=2", "checkpoint.max_failed_saves=2",
             f"ft={ft}", "debug.digest=true"]  # fmt: skip
    proc = start_driver(tmp_path, *extra, f"checkpoint.root={full_disk}")
    try:
        code = proc.wait(timeout=300)
    finally:
        proc.kill()
    text = output(tmp_path)
    assert code == 1, text
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "checkpoint saves in a row failed" in errors[0], text
    assert "checkpoint.max_failed_saves=2" in errors[0] and "Traceback" not in text
    rows = [json.loads(line) for line in (tmp_path / "out/metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["step"] < 400 and rows[-1]["ckpt_failures"] >= 2  # stopped early
    first = next(r for r in rows if r["ckpt_failures"])  # a background write: a row later
    assert "step-2: write failed" in first["ckpt_error"]  # ENOSPC, in torch's words
    summary = json.loads((tmp_path / "out/summary.json").read_text())
    assert summary["ckpt_failures"] >= 2 and summary["ckpt_uri"] is None
    assert "checkpoint saves failed" in text and "checkpoints are failing" in text
    if ft == "on":  # both groups stopped after the same step, the writer's row the last
        from tests.driver.test_termination import last_steps

        assert last_steps(tmp_path / "out") == {0: rows[-1]["step"], 1: rows[-1]["step"]}
