"""The soak's DiLoCo pair (`scripts/soak --diloco`): two learners of the tiny LM, each its
own local run (`python -m driver.train ... diloco.learner=a`, one CPU worker, no torchft:
a lost worker makes Ray Train start the group again from the newest checkpoint), and a
synchronizer process of the soak's own (driver.diloco.local.start_synchronizer) on a
fixed loopback port, so that after a SIGKILL it starts again where the learners look for
it, with its state (the rounds merged) from its folder.

    sync = Sync(out / "sync", ["a", "b"])
    sync.start()                               # its address
    runs = learners(out, sync)                 # [Run a, Run b]
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from driver.diloco import keys, state
from driver.diloco.local import start_synchronizer
from driver.embedded.cluster import free_port
from tests.soak.launch import CHECKPOINT_EVERY, Run

LM = "runs/train/tiny-lm.yaml"
LEARNER = [
    "aux=none",
    "parallelism.workers=1",
    "train.steps=1000000",
    f"checkpoint.interval_steps={CHECKPOINT_EVERY}",
    "checkpoint.keep_last=3",
    "logging.format=progress",
    "diloco.sync_every=20",
    "diloco.learners=2",
]


class Sync:
    def __init__(self, out: Path, names: list[str]):
        self.out, self.names = out, names
        out.mkdir(parents=True, exist_ok=True)
        keys.generate(out / "keys", names)
        self.address = f"tcp://127.0.0.1:{free_port()}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> str:
        options = ["--expect", ",".join(self.names), "--round-timeout", "60"]
        self.proc, bound = start_synchronizer(self.out, options, bind=self.address)
        return bound

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def rounds(self) -> int:
        return len(state.read_rounds(self.out / "state"))


def learners(out: Path, sync: Sync) -> list[Run]:
    """The pair's learner runs, each with its data shard and the synchronizer's address."""
    runs = []
    for index, name in enumerate(sync.names):
        words = [*LEARNER, f"diloco.learner={name}", f"diloco.index={index}",
                 f"diloco.address={sync.address}", f"diloco.keys={sync.out / 'keys'}"]  # fmt: skip
        runs.append(Run(out / name, f"soak-{name}", config=LM, words=words))
    return runs
