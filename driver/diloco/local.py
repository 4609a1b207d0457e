"""A DiLoCo experiment on this machine: the synchronizer and each learner's driver.

    python -m driver.diloco.local --plan outputs/<team>/<name>/plan.json

runs an experiment's plan, written by `runner run --local EXPERIMENT.yaml`
(`runner.experiment_local`): its `out` folder, the synchronizer's options and each
learner's process, the driver (`python -m driver.train ... diloco.learner=...`), to which
the local synchronizer's address and the keys folder are added as overrides
(`diloco.address=... diloco.keys=...`). Keys are generated into `<out>/keys`
(`driver.diloco.keys`); the synchronizer (`start_synchronizer`) binds a free loopback port
and keeps its state in `<out>/state`. Every process's lines are shown with its name in
front (`[us] `, `[sync] `); Ctrl-C stops them all (`driver.diloco.children`); exit 0 when
every learner finished, 1 with one line naming each learner that failed, 130 when stopped,
2 on a bad plan.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from driver.diloco import keys, state
from driver.diloco.children import Children


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


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m driver.diloco.local", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "--plan", required=True, help="an experiment's plan (runner run --local writes it)"
    )
    args, rest = p.parse_known_args(argv)
    if rest:
        p.error(f"--plan takes no learner options: {' '.join(rest)}")
    return args


def main(argv: list[str] | None = None) -> int:
    return run_plan(parse_args(argv).plan)


if __name__ == "__main__":
    raise SystemExit(main())
