"""A DiLoCo experiment on this machine: a synchronizer and N learners as local processes.

    python -m driver.diloco.local --plan outputs/<team>/<name>/plan.json
    python -m driver.diloco.local --learners 2 --steps 200 --sync-every 20 [--mode decoupled]
        [--out outputs/diloco-local] [trainer options: --d-model --batch --lr ...]
        [synchronizer options: --outer-lr 0.7 --outer-momentum 0.9 --no-nesterov
         --min-learners 1 --round-timeout 60]

`--plan` runs an experiment's plan, written by `runner run --local EXPERIMENT.yaml`
(`runner.experiment_local`): its `out` folder, the synchronizer's options and each
learner's process, the driver (`python -m driver.train ... diloco.learner=...`), to which
the local synchronizer's address and the keys folder are added as overrides
(`diloco.address=... diloco.keys=...`). Every process's
lines are shown with its name in front (`[us] `, `[sync] `); Ctrl-C stops them all
(`driver.diloco.children`); exit 1 with one line naming each learner that failed, 130
when stopped.

The second form runs the reference LM's small trainer instead
(`python -m driver.diloco.trainer`, its lines in `<out>/<learner>.jsonl`; the benchmark's
learners). Either way keys are generated into `<out>/keys` (`driver.diloco.keys`), the
synchronizer binds a free loopback port and keeps its state in `<out>/state`. The synchronizer
options given are passed on (`--compression` to both sides); those left out keep the
synchronizer's defaults. Prints each
learner's final held-out loss and the rounds merged. Exit 0 when every process ended well.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from driver.diloco import keys, state, trainer
from driver.diloco.children import Children

NAMES = "abcdefghijklmnopqrstuvwxyz"


def learner_names(count: int) -> list[str]:
    return [f"learner-{NAMES[i]}" for i in range(count)]


def start_synchronizer(
    out: Path, extra: list[str], bind: str = "tcp://127.0.0.1:*", children: Children | None = None
):
    """Start the synchronizer process (one of `children`, as `sync`, when given: its lines
    shown and in its log, out of the terminal's process group); returns (process, its
    bound endpoint)."""
    endpoint = out / "endpoint"
    endpoint.unlink(missing_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "driver.diloco.synchronizer",
        "--bind",
        bind,
        "--keys",
        str(out / "keys"),
        "--state",
        str(out / "state"),
        "--endpoint-file",
        str(endpoint),
        *extra,
    ]
    log = open(out / "synchronizer.log", "a")
    if children is None:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    else:
        proc = children.start("sync", cmd, dict(os.environ), log=log, start_new_session=True)
    deadline = time.time() + 120
    while not endpoint.exists():
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            raise RuntimeError(f"synchronizer did not start (see {out / 'synchronizer.log'})")
        time.sleep(0.1)
    return proc, endpoint.read_text()


def learner_cmd(name: str, index: int, count: int, address: str, out: Path, extra: list[str]):
    return [
        sys.executable,
        "-m",
        "driver.diloco.trainer",
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
        prog="python -m driver.diloco.local", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--plan", help="an experiment's plan (runner run --local writes it)")
    p.add_argument("--learners", type=int, default=2)
    p.add_argument("--out", default="outputs/diloco-local")
    p.add_argument("--round-timeout", type=float, default=60.0)
    p.add_argument("--compression", default="bf16", help="bf16, fp16, int8 or fp32 (both ways)")
    p.add_argument("--outer-lr", type=float, help="synchronizer's (default 0.7)")
    p.add_argument("--outer-momentum", type=float, help="synchronizer's (default 0.9)")
    p.add_argument("--no-nesterov", action="store_true", help="synchronizer: plain momentum")
    p.add_argument("--min-learners", type=int, help="synchronizer's (default 1)")
    args, rest = p.parse_known_args(argv)
    if args.plan:
        if rest:
            p.error(f"--plan takes no learner options: {' '.join(rest)}")
        return args, []
    rest = [*rest, "--compression", args.compression]
    trainer.parse_args(["--out", "x", *rest])  # bad trainer options fail here, exit 2
    return args, rest


def plan_sync_options(plan: dict) -> list[str]:
    """The synchronizer's options of a plan: its outer settings, the learners expected."""
    return [*plan["synchronizer"], "--expect", ",".join(run["name"] for run in plan["learners"])]


def plan_learner_command(run: dict, address: str, keys_dir: Path) -> list[str]:
    """A learner's driver command of a plan, with the local synchronizer's address and the
    keys folder as overrides of its `diloco` section."""
    return [*run["command"], f"diloco.address={address}", f"diloco.keys={keys_dir.resolve()}"]


def run_plan(path: str) -> int:
    """Run an experiment's plan: keys, the synchronizer, every learner's driver."""
    try:
        plan = json.loads(Path(path).read_text())
        out, names = Path(plan["out"]), [run["name"] for run in plan["learners"]]
    except (OSError, ValueError, KeyError, TypeError) as err:
        print(f"error: {path}: not a plan of runner run --local ({err})", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    keys.generate(out / "keys", names)
    children = Children()
    sync, address = start_synchronizer(out, plan_sync_options(plan), children=children)
    children.say(f"synchronizer on {address}; learners {', '.join(names)}; outputs in {out}")
    try:
        for run in plan["learners"]:
            command = plan_learner_command(run, address, out / "keys")
            children.start(run["name"], command, {**os.environ, **run["env"]})
        codes = children.wait(names)
    finally:
        children.close("sync")
        children.join()
    rounds = state.read_rounds(out / "state")
    print(f"rounds merged: {len(rounds)} (state and log in {out})")
    if children.stopped:
        print("stopped")
        return children.stopped
    failed = [f"{name} (exit {code}, see its [{name}] lines)" for name, code in codes.items()]
    failed = [line for line, code in zip(failed, codes.values(), strict=True) if code]
    if failed:
        print(f"error: learner {'; learner '.join(failed)} failed", file=sys.stderr)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    args, rest = parse_args(argv)
    if args.plan:
        return run_plan(args.plan)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    names = learner_names(args.learners)
    keys.generate(out / "keys", names)
    sync, address = start_synchronizer(out, [*sync_options(args), "--expect", ",".join(names)])
    print(f"synchronizer on {address}; {len(names)} learners; outputs in {out}")
    try:
        procs = [
            subprocess.Popen(learner_cmd(n, i, len(names), address, out, rest))
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
