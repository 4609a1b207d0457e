"""Run folders for the dashboard's post-mortem tests: a failed run from the failure corpus
(a real local run whose rank 1 hung; its log files ingested into a store), a DiLoCo
experiment's two learners, and a run without a store.

    python -m tests.ui.postmortem outputs-demo   # then: runner ui --outputs outputs-demo
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

TEAM, FAILED, EXPERIMENT = "research", "hang", "lm-diloco"
LEARNERS = ("learner-a", "learner-b")
CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "failures"


def fill(root: Path, reader) -> None:
    """Write the folders under `root` (`<team>/<run>/`); `reader` writes the store."""
    dest = root / TEAM / FAILED
    shutil.copytree(CORPUS / FAILED, dest)
    rows = [
        json.loads(line)
        for path in sorted((dest / "logs").glob("*.jsonl"))
        for line in path.read_text().splitlines()
        if line
    ]
    reader.insert(dest, "platform.run_logs", rows)
    reader.insert(dest, "platform.run_metrics", metric_rows(dest / "metrics.jsonl"))
    for index, learner in enumerate(LEARNERS):
        folder = root / TEAM / f"{EXPERIMENT}-{learner}"
        folder.mkdir(parents=True)
        rows = [
            {
                "team": TEAM,
                "run": folder.name,
                "learner": learner,
                "rank": 0,
                "attempt": 0,
                "step": s,
                "time": 1.7e9 + s,
                "loss": 3.0 - 0.1 * s - 0.05 * index,
            }
            for s in range(1, 11)
        ]
        lines = [json.dumps(row) for row in rows]
        (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n")
        (folder / "summary.json").write_text(
            json.dumps({"steps": 10, "final_loss": 2.0, "world_size": 1})
        )


def metric_rows(path: Path) -> list[dict]:
    """The store's rows of a metrics file's rows (loss, step time, throughput)."""
    from observability import store

    out = []
    for line in path.read_text().splitlines():
        row = json.loads(line)
        values = {
            "train/loss": row.get("loss"),
            "train/step_time_s": row.get("step_time"),
            "train/tokens_per_s": row.get("tokens_per_s"),
        }
        out += store.metric_rows(
            row,
            row.get("rank", 0),
            row["step"],
            row["time"],
            {k: v for k, v in values.items() if v is not None},
        )
    return out


def main() -> int:
    from runner.ui.reader import StoreReader

    reader = StoreReader(max_age_s=0)
    try:
        fill(Path(sys.argv[1] if len(sys.argv) > 1 else "outputs-demo"), reader)
    finally:
        reader.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
