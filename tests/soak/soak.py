"""The soak: a composed local run (tests/soak/launch.py) under faults for a set time, then
the checks (docs/soak.md). `scripts/soak` runs `main`.

1. The failure-free run (unless --no-baseline): the same command for the same time.
2. The run under faults: from its first row on, at random intervals (seeded), a SIGKILL of
   a random component (tests/soak/chaos.py); a killed driver is started again with the same
   command, once everything of the killed launch is gone.
3. At the end of each, once the last launch has its first row: SIGTERM to the driver (it
   saves and stops), and everything it started must end. Then the checks: rows of record
   (tests/soak/records.py), resumes, orphans, the soak's own descriptors and memory, and
   the throughput ratio.
"""

from __future__ import annotations

import os
import random
import signal
import time
from dataclasses import dataclass, field

from tests.soak import chaos, procs
from tests.soak.launch import Launch, Run
from tests.soak.records import check

GONE_S = 60.0
"""How long a launch's processes may take to end after its driver did."""
STOP_S = 180.0
"""How long a driver may take to stop after SIGTERM (a final checkpoint, then Ray)."""
FIRST_ROW_S = 180.0
"""How long a launch may take to its first row when the time is up."""
POLL_S = 1.0
FD_BOUND, RSS_BOUND = 16, 64 << 20


@dataclass
class Outcome:
    committed: int = 0
    """Steps committed when the phase's time was up."""
    seconds: float = 0.0
    faults: int = 0
    problems: list[str] = field(default_factory=list)


class Soak:
    def __init__(self, seed: int, fault_every: float):
        self.rng, self.fault_every = random.Random(seed), fault_every
        self.deck = chaos.Deck(random.Random(f"kinds-{seed}"))  # the kinds' order: the seed's alone
        self.t0 = time.monotonic()
        self.seen: dict[tuple[int, int], procs.Proc] = {}
        """Every process seen below the soak: (pid, start) -> Proc."""
        self.of_launch: dict[int, dict[tuple[int, int], procs.Proc]] = {}
        """The processes seen below each launch's driver (by the driver's pid)."""

    def say(self, line: str) -> None:
        print(f"t=+{time.monotonic() - self.t0:7.1f}s {line}", flush=True)

    def watch(self, launch: Launch) -> dict[int, procs.Proc]:
        table = procs.snapshot()
        mine = self.of_launch.setdefault(launch.proc.pid, {})
        for pid in procs.descendants(os.getpid(), table):
            self.seen.setdefault((pid, table[pid].start), table[pid])
        for pid in procs.descendants(launch.proc.pid, table) | {launch.proc.pid} & set(table):
            mine.setdefault((pid, table[pid].start), table[pid])
        procs.reap(keep={launch.proc.pid})
        return table

    def phase(self, run: Run, minutes: float, faults: bool) -> Outcome:
        outcome, launch = Outcome(), self.launch(run)
        deadline = launch.started + minutes * 60
        next_fault = None
        while time.monotonic() < deadline:
            table = self.watch(launch)
            self.announce(run, launch)
            code = launch.proc.poll()
            if code is not None:
                self.say(f"{run.name}: the driver ended by itself: exit {code}")
                if code != 3:  # 3: ft below its minimum of replicas (two faults too close)
                    outcome.problems.append(f"launch {len(run.launches)} ended with exit {code}")
                launch = self.relaunch(run, launch, outcome)
            elif faults and next_fault is None and run.metrics.exists():
                next_fault = time.monotonic() + chaos.interval(self.rng, self.fault_every)
            elif faults and next_fault is not None and time.monotonic() >= next_fault:
                launch = self.fault(run, launch, table, outcome)
                next_fault = time.monotonic() + chaos.interval(self.rng, self.fault_every)
            time.sleep(POLL_S)
        outcome.committed = check(run.segments()[0]).committed
        outcome.seconds = minutes * 60
        self.until_trained(run, launch, outcome)
        self.stop(run, launch, outcome)
        return outcome

    def until_trained(self, run: Run, launch: Launch, outcome: Outcome) -> None:
        """Wait (at most FIRST_ROW_S) for the last launch's first row before the stop: a
        resumed launch shows the rows it resumed with (a stop during start-up is another
        drill: tests/driver/test_interrupt.py)."""
        deadline = time.monotonic() + FIRST_ROW_S
        while not run.segments()[0][-1].steps and launch.proc.poll() is None:
            if time.monotonic() > deadline:
                outcome.problems.append(f"launch {len(run.launches)} had no row in "
                                        f"{FIRST_ROW_S:.0f} s")  # fmt: skip
                return
            self.watch(launch)
            self.announce(run, launch)
            time.sleep(POLL_S)

    def launch(self, run: Run) -> Launch:
        launch = run.start()
        self.say(f"{run.name}: launch {len(run.launches)}: driver pid {launch.proc.pid}"
                 f" (newest committed checkpoint: step {launch.expected})")  # fmt: skip
        return launch

    def announce(self, run: Run, launch: Launch) -> None:
        """Print a launch's first line once it has one (a resumed run's says from where)."""
        if not launch.announced and (line := run.first_line(launch)):
            launch.announced = True
            self.say(f"{run.name}: launch {run.launches.index(launch) + 1} says: {line[:150]}")

    def fault(self, run: Run, launch: Launch, table, outcome: Outcome) -> Launch:
        picked = self.deck.choose(chaos.victims(launch.proc.pid, table))
        if picked is None:
            return launch
        kind, pid = picked
        outcome.faults += 1
        self.say(f"fault {outcome.faults}: SIGKILL {kind} pid {pid} ({table[pid].cmdline[:70]})")
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            self.say(f"  pid {pid} had already ended")
        if kind != chaos.DRIVER:
            return launch
        launch.proc.wait()
        return self.relaunch(run, launch, outcome)

    def relaunch(self, run: Run, old: Launch, outcome: Outcome) -> Launch:
        """The same command again, once everything of `old` has ended."""
        left = self.wait_gone(self.of_launch.get(old.proc.pid, {}).values())
        if left:
            outcome.problems.append(f"{len(left)} processes of launch {len(run.launches)} "
                                    "outlived its driver: " + names(left))  # fmt: skip
            kill(left)
        return self.launch(run)

    def stop(self, run: Run, launch: Launch, outcome: Outcome) -> None:
        self.watch(launch)
        self.say(f"{run.name}: time is up: SIGTERM to the driver")
        asked = time.monotonic()
        launch.proc.send_signal(signal.SIGTERM)
        try:
            code = launch.proc.wait(STOP_S)
        except Exception:  # noqa: BLE001 (subprocess.TimeoutExpired)
            outcome.problems.append(f"the driver did not stop within {STOP_S:.0f} s of SIGTERM")
            launch.proc.kill()
            code = launch.proc.wait()
        self.say(f"{run.name}: the driver stopped: exit {code} after {time.monotonic() - asked:.0f}"
                 f" s; last row: step {check(run.segments()[0]).committed}, newest committed "
                 f"checkpoint: step {run.newest_checkpoint()}")  # fmt: skip
        if code not in (0, 143):
            outcome.problems.append(f"the last launch ended with exit {code} after SIGTERM")
        left = self.wait_gone(self.of_launch.get(launch.proc.pid, {}).values())
        if left:
            outcome.problems.append(f"{len(left)} processes outlived the stopped driver: "
                                    + names(left))  # fmt: skip
            kill(left)

    def wait_gone(self, seen) -> list[procs.Proc]:
        seen = list(seen)
        deadline = time.monotonic() + GONE_S
        while (left := procs.alive(seen)) and time.monotonic() < deadline:
            procs.reap(keep=set())
            time.sleep(0.5)
        procs.reap(keep=set())
        return left


def names(left: list[procs.Proc]) -> str:
    return ", ".join(f"{p.pid} {p.cmdline[:40]}" for p in left[:5])


def kill(left: list[procs.Proc]) -> None:
    for proc in left:
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
