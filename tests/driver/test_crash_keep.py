"""Crash bundles kept: every failed rank's error in the run's logs, the bundle signed with
the run's key and copied to `<bundle_root>/<team>/<run>/`, a changed or planted file
detected; and a real local run whose log lines (driver, every rank, the failure) reach its
store and whose bundle is kept (a child process: it owns its chDB store)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from catalog.runkey import run_key
from driver.output import crash, crash_gather, crash_upload
from observability import bundle

ROOT = Path(__file__).resolve().parents[2]
SECRET = b"a-team-secret"


def cfg(out: Path, root: Path | None) -> SimpleNamespace:
    return SimpleNamespace(
        run=SimpleNamespace(output_dir=str(out), team="research", name="tiny-lm", cluster="c"),
        logging=SimpleNamespace(
            store=False, bundle_root=str(root) if root else None, otel_endpoint=None
        ),
    )


def failure(rank: int) -> dict:
    tb = "Traceback ...\nValueError: bad batch"
    return {
        "error": "ValueError: bad batch",
        "traceback": tb,
        "time": 1.7e9 + rank,
        "host": f"w-{rank}",
        "pid": 100 + rank,
        "log_lines": [],
    }


def test_a_kept_bundle_is_signed_and_its_copy_checks(tmp_path, monkeypatch):
    monkeypatch.setenv("REVE_CHECKPOINT_KEY", SECRET.decode())
    out, root = tmp_path / "out", tmp_path / "bucket"
    hosts = {
        0: {"pod": "w-0", "node": "n-0", "attempt": 0},
        1: {"pod": "w-1", "node": "n-1", "attempt": 0},
    }
    folder = crash.collect(
        cfg(out, root), "run: {}\n", RuntimeError("x"), {1: failure(1)}, ["driver line"], hosts
    )
    info = json.loads((folder / "ranks.json").read_text())
    assert info["failed"]["1"]["node"] == "n-1" and set(info["members"]) == {"0", "1"}
    assert list((folder / "nodes").iterdir())  # this node's kernel log, or why it is unreadable
    kept = root / "research" / "tiny-lm" / folder.name
    key = run_key(SECRET, "research", "tiny-lm")
    assert bundle.check(kept, key, "research", "tiny-lm") == []
    assert bundle.check(folder, key, "research", "tiny-lm") == []
    (kept / "ranks.json").write_text("{}")
    assert bundle.check(kept, key, "research", "tiny-lm") == [
        "ranks.json: changed since the bundle was signed"
    ]
    rows = [json.loads(x) for x in (out / "logs" / "failures.jsonl").read_text().splitlines()]
    assert [(r["rank"], r["pod"], r["node"], r["level"]) for r in rows] == [
        (1, "w-1", "n-1", "ERROR")
    ]
    assert rows[0]["line"].startswith("rank 1 failed: ValueError: bad batch")


def test_a_bundle_that_cannot_be_uploaded_stays_in_the_output_folder(tmp_path, capsys):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    folder = crash.collect(cfg(tmp_path / "out", blocked), "", RuntimeError("x"), {}, [], {})
    assert folder.is_dir() and "crash bundle not uploaded" in capsys.readouterr().err


def test_destinations_are_plain_names_under_the_team():
    assert crash_upload.destination("gs://b", "research", "tiny-lm", "crash-1") == (
        "gs://b/research/tiny-lm/crash-1"
    )
    for bad in ("", "..", "a/b"):
        try:
            crash_upload.destination("gs://b", "research", "tiny-lm", bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} accepted")


def test_a_node_gives_its_dumps_log_tails_and_kernel_log(tmp_path):
    from observability import flight_recorder as fr

    dumps = tmp_path / fr.DUMP_DIR
    dumps.mkdir()
    (dumps / "rank_3.json").write_text(
        json.dumps({"version": "2.4", "entries": [], "pg_config": {}})
    )
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "train-rank-3.jsonl").write_text("".join(f"{i}\n" for i in range(500)))
    got = crash_gather.node_evidence(str(tmp_path))
    assert set(got["dumps"]) == {"3"} and not list(dumps.glob("rank_*"))  # moved aside
    assert got["logs"]["train-rank-3.jsonl"].splitlines()[-1] == "499"
    assert len(got["logs"]["train-rank-3.jsonl"].splitlines()) == crash_gather.LOG_TAIL_LINES
    assert got["kernel"] or got["kernel_source"]


def test_a_real_run_keeps_its_log_lines_and_its_bundle(tmp_path):
    out, root = tmp_path / "out", tmp_path / "bucket"
    command = [
        sys.executable,
        "-m",
        "driver.train",
        "runs/train/tiny-lm.yaml",
        "run.name=kept",
        "run.team=research",
        f"run.output_dir={out}",
        f"logging.bundle_root={root}",
        "train.steps=12",
        "optimizer.warmup_steps=3",
        "data.size=1024",
        "debug.fail_at_step=4",
        "debug.fail_rank=1",
        "parallelism.workers=2",
        f"checkpoint.root={tmp_path / 'ckpt'}",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}  # its own Ray
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "crash bundle kept at" in done.stderr
    probe = (
        "import json, sys\nfrom observability import store, log_search\n"
        "s = store.LocalStore.open(sys.argv[1], schema=False)\n"
        "print(json.dumps(log_search.lines(s.query, 'research', 'kept', limit=5000)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    lines = json.loads(done.stdout)
    ranks = {r["rank"] for r in lines}
    assert {-1, 0, 1} <= ranks  # the driver's lines and both ranks'
    errors = [r for r in lines if r["level"] == "ERROR"]
    assert any(r["rank"] == 1 and "debug.fail_at_step=4" in r["line"] for r in errors)
    assert {r["service"] for r in lines} == {"train", "driver"}
    (bundle_dir,) = list((root / "research" / "kept").iterdir())
    assert (bundle_dir / bundle.MANIFEST).exists() and (bundle_dir / "ranks.json").exists()
    assert bundle.check(bundle_dir, None, "research", "kept") == []
