"""Through the driver, two gloo workers on one embedded Ray: every checkpoint commit finds
its steps' rows of record already in metrics.jsonl, so a driver killed right after a commit
loses no row (the run resumed from that checkpoint never trains those steps again).

The driver's progress thread is slowed to one drain an hour here: the rows reach
metrics.jsonl only when a commit asks the driver to write them (`persist`:
driver.metrics.rank.RankReporter.durable) or when the run ends. A thread watches the
checkpoint folder; each time a marker appears it reads metrics.jsonl, which must already
hold the rows through that step."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from driver.checkpoint.layout import MARKER
from driver.output.progress import Progress
from driver.train import main
from tests.driver.conftest import TINY_LM

STEPS = 10


def watch(run_dir: Path, metrics: Path, seen: dict[int, int], stop: threading.Event) -> None:
    """Until `stop`: for each new commit marker, the newest step metrics.jsonl holds."""
    while not stop.wait(0.02):
        for marker in run_dir.glob(f"step-*/{MARKER}"):
            step = int(marker.parent.name.removeprefix("step-"))
            if step not in seen:
                text = metrics.read_text() if metrics.exists() else ""
                rows = [json.loads(line) for line in text.splitlines() if line.endswith("}")]
                seen[step] = max((row["step"] for row in rows), default=0)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_every_commit_finds_its_steps_rows_already_written(ray_local, tmp_path, monkeypatch,
                                                           mode):  # fmt: skip
    monkeypatch.setattr(Progress.__init__, "__defaults__", (3600.0,))
    out, root = tmp_path / "out", tmp_path / "ckpt"
    seen: dict[int, int] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=watch, args=(root / "t" / mode, out / "metrics.jsonl",
                                                   seen, stop))  # fmt: skip
    watcher.start()
    try:
        code = main([TINY_LM, f"train.steps={STEPS}", "optimizer.warmup_steps=2",
                     "data.size=1024", "logging.format=json", "checkpoint.interval_steps=2",
                     "checkpoint.keep_last=0", f"checkpoint.async_mode={mode}", "run.team=t",
                     f"checkpoint.root={root}", f"run.name={mode}",
                     f"run.output_dir={out}"])  # fmt: skip
    finally:
        stop.set()
        watcher.join()
    assert code == 0
    assert sorted(seen) == [2, 4, 6, 8, 10]  # every commit seen
    assert all(rowed >= step for step, rowed in seen.items()), seen
