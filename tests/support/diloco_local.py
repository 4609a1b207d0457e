"""A local DiLoCo experiment of small trainer processes: a synchronizer and N learners.

    python -m tests.support.diloco_local --learners 2 --steps 200 --sync-every 20
        [--mode decoupled] [--out outputs/diloco-local]
        [trainer options: --d-model --batch --lr ...]
        [synchronizer options: --outer-lr 0.7 --outer-momentum 0.9 --no-nesterov
         --min-learners 1 --round-timeout 60]

Each learner runs the reference LM's small trainer (`python -m tests.support.diloco_trainer`, its
lines in `<out>/<learner>.jsonl`; the benchmark's learners). Keys are generated into
`<out>/keys` (`driver.diloco.keys`), the synchronizer (`driver.diloco.local.start_synchronizer`)
binds a free loopback port and keeps its state in `<out>/state`. The synchronizer options
given are passed on (`--compression` to both sides); those left out keep the synchronizer's
defaults. Prints each learner's final held-out loss and the rounds merged. Exit 0 when every
process ended well, 2 on a bad option. An experiment's own learners (the real driver) run
with `python -m driver.diloco.local --plan` instead.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from driver.diloco import keys, state
from driver.diloco.local import start_synchronizer
from tests import support
from tests.support import diloco_trainer

NAMES = "abcdefghijklmnopqrstuvwxyz"


def learner_names(count: int) -> list[str]:
    return [f"learner-{NAMES[i]}" for i in range(count)]


def learner_cmd(name: str, index: int, count: int, address: str, out: Path, extra: list[str]):
    return [
        sys.executable,
        "-m",
        "tests.support.diloco_trainer",
        "--learner",
        name,
        "--index",
        str(index),
        "--learners",
        str(count),
        "--address",
        address,
        "--keys",
        str(out / "keys"),
        "--out",
        str(out),
        *extra,
    ]


def sync_options(args: argparse.Namespace) -> list[str]:
    """The synchronizer's options among ours (those given; the rest keep its defaults)."""
    words = ["--round-timeout", str(args.round_timeout), "--compression", args.compression]
    for option in ("outer_lr", "outer_momentum", "min_learners"):
        value = getattr(args, option)
        if value is not None:
            words += ["--" + option.replace("_", "-"), str(value)]
    return [*words, "--no-nesterov"] if args.no_nesterov else words


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    """Our options, and the rest (the learners' options, checked here: exit 2 if bad)."""
    p = argparse.ArgumentParser(
        prog="python -m tests.support.diloco_local", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--learners", type=int, default=2)
    p.add_argument("--out", default="outputs/diloco-local")
    p.add_argument("--round-timeout", type=float, default=60.0)
    p.add_argument("--compression", default="bf16", help="bf16, fp16, int8 or fp32 (both ways)")
    p.add_argument("--outer-lr", type=float, help="synchronizer's (default 0.7)")
    p.add_argument("--outer-momentum", type=float, help="synchronizer's (default 0.9)")
    p.add_argument("--no-nesterov", action="store_true", help="synchronizer: plain momentum")
    p.add_argument("--min-learners", type=int, help="synchronizer's (default 1)")
    args, rest = p.parse_known_args(argv)
    rest = [*rest, "--compression", args.compression]
    diloco_trainer.parse_args(["--out", "x", *rest])  # bad trainer options fail here, exit 2
    return args, rest


def main(argv: list[str] | None = None) -> int:
    args, rest = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    names = learner_names(args.learners)
    keys.generate(out / "keys", names)
    sync, address = start_synchronizer(out, [*sync_options(args), "--expect", ",".join(names)])
    print(f"synchronizer on {address}; {len(names)} learners; outputs in {out}")
    try:
        procs = [
            subprocess.Popen(learner_cmd(n, i, len(names), address, out, rest), env=support.env())
            for i, n in enumerate(names)
        ]
        codes = [proc.wait() for proc in procs]
    finally:
        sync.terminate()
        sync.wait(30)
    for name in names:
        summary = (
            json.loads((out / f"{name}.json").read_text())
            if (out / f"{name}.json").exists()
            else {}
        )
        print(
            f"  {name}: held-out loss {summary.get('final_eval', float('nan')):.4f}, "
            f"round {summary.get('round')}"
        )
    print(f"  rounds merged: {len(state.read_rounds(out / 'state'))}")
    return 0 if all(code == 0 for code in codes) else 1


if __name__ == "__main__":
    raise SystemExit(main())
