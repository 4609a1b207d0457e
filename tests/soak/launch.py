"""One run under the soak: the composed local run's command, started (and started again
after its driver was killed) as a user would, each launch's output in a file of its own.

    run = Run(out / "faults", "soak", seed)
    launch = run.start()         # python -m driver.train ... in a session of its own
    run.first_line(launch)       # "resuming default/soak from step 50: ..." or ""
    run.rows()                   # the launches' parts of metrics.jsonl (tests/soak/records.py)

The run: the tiny DiT with live fault tolerance (`ft=on`: 2 training workers, each its own
replica group), its auxiliary services (`aux=encode_eval`: an encoder and an evaluator, each a
worker behind a proxy), the data pipeline (2 producers per worker), a checkpoint every
`CHECKPOINT_EVERY` steps and the run's chDB store, on an embedded Ray of its own.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.soak.records import Segment, read_rows, split

ROOT = Path(__file__).resolve().parents[2]
CONFIG = "runs/train/tiny-dit.yaml"
CHECKPOINT_EVERY = 50
COMPOSED = [
    "ft=on",
    "aux=encode_eval",
    "data.loader=pipeline",
    "data.producers=2",
    "train.steps=1000000",
    "train.micro_batch_size=8",
    f"checkpoint.interval_steps={CHECKPOINT_EVERY}",
    "checkpoint.keep_last=3",
    "logging.format=progress",
]
RESUMING = re.compile(r"resuming (\S+) from step (\d+): ")


@dataclass
class Launch:
    proc: subprocess.Popen
    started: float
    offset: int
    """Size of metrics.jsonl when it started: its rows are those after."""
    expected: int
    """The newest committed checkpoint's step when it started (0: none)."""
    log: Path
    announced: bool = False
    """Whether the soak has printed its first line."""


class Run:
    def __init__(self, out: Path, name: str, config: str = CONFIG, words: list[str] = COMPOSED):
        self.out, self.name, self.config, self.words = out, name, config, words
        self.output_dir = out / "run"
        self.checkpoints = out / "checkpoints"
        self.metrics = self.output_dir / "metrics.jsonl"
        self.launches: list[Launch] = []

    def command(self) -> list[str]:
        places = [f"run.output_dir={self.output_dir}", f"checkpoint.root={self.checkpoints}"]
        return [sys.executable, "-m", "driver.train", self.config, *self.words,
                f"run.name={self.name}", *places]  # fmt: skip

    def start(self) -> Launch:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        env.pop("RAY_ADDRESS", None)  # an embedded Ray of its own
        log = self.out / f"launch-{len(self.launches) + 1}.txt"
        self.out.mkdir(parents=True, exist_ok=True)
        offset = self.metrics.stat().st_size if self.metrics.exists() else 0
        expected = self.newest_checkpoint()
        with log.open("w") as handle:
            proc = subprocess.Popen(self.command(), cwd=ROOT, env=env, stdout=handle,
                                    stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        launch = Launch(proc, time.monotonic(), offset, expected, log)
        self.launches.append(launch)
        return launch

    def newest_checkpoint(self) -> int:
        """The step of the newest checkpoint with its commit marker (0: none)."""
        steps = [int(path.parent.name.removeprefix("step-"))
                 for path in self.checkpoints.glob(f"*/{self.name}/step-*/COMMITTED")]  # fmt: skip
        return max(steps, default=0)

    def first_line(self, launch: Launch) -> str:
        text = launch.log.read_text(errors="replace").replace("\r", "\n")
        return next((line for line in text.splitlines() if line.strip()), "")

    def resumed(self, launch: Launch) -> int:
        """The step its first line says it resumes from (0: it did not say so)."""
        found = RESUMING.match(self.first_line(launch))
        return int(found.group(2)) if found else 0

    def segments(self) -> tuple[list[Segment], int]:
        """(the segments of metrics.jsonl, launch by launch; torn lines in all)."""
        data = self.metrics.read_bytes() if self.metrics.exists() else b""
        bounds = [launch.offset for launch in self.launches] + [len(data)]
        segments, torn = [], 0
        for launch, start, end in zip(self.launches, bounds, bounds[1:], strict=False):
            rows, bad = read_rows(data[start:end])
            segments += split(self.resumed(launch), rows)
            torn += bad
        return segments, torn
