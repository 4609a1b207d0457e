"""The label set on what the driver prints and what the workers log: every JSON line of the
driver (messages and steps) carries all ten labels; a worker's log lines carry its rank's."""

from __future__ import annotations

import json
from types import SimpleNamespace as NS

from catalog import labels
from driver.output.logs import worker_logger
from driver.output.progress import Progress


def test_every_driver_json_line_has_the_label_set(tmp_path, capsys):
    cfg = NS(logging=NS(metrics_file="m.jsonl", tail_lines=10), train=NS(steps=2),
             run=NS(name="tiny", team="research", cluster="c1"))  # fmt: skip
    progress = Progress(cfg, sink=None, output_dir=tmp_path, fmt="json")
    progress.log("starting")
    mine = {"step": 1, "loss": 2.0, "lr": 1e-3, "step_time": 0.1, "time": 1.0, "rank": 0}
    other = {"step": 1, "step_time": 0.1, "time": 1.0, "rank": 1}
    progress.take([{**mine, "attempt": 0}, {**other, "attempt": 0}])
    progress.metrics.close()
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line.get("message", line.get("step")) for line in lines] == ["starting", 1]
    for line in lines:
        assert set(labels.TELEMETRY_LABELS) <= set(line), line
        assert (line["run"], line["team"], line["cluster"], line["service"]) == (
            "tiny",
            "research",
            "c1",
            "train",
        )
        assert line["pod"] and line["node"]  # the hostname outside Kubernetes
    assert [r["rank"] for r in progress.rows] == [0]  # the summary's rows: rank 0's


def test_worker_log_lines_carry_the_ranks_labels():
    tags = {"run": "tiny", "rank": 1, "attempt": 2, "pod": "p", "node": "n"}
    logger, tail = worker_logger(5, tags)
    logger.info("step %d loss %.4f", 3, 1.5)
    (line,) = tail.lines
    assert line.endswith("INFO run=tiny rank=1 attempt=2 pod=p node=n step 3 loss 1.5000")
