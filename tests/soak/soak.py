"""The soak: a composed local run (tests/soak/launch.py) under faults for a set time, then
the checks (docs/soak.md). `scripts/soak` runs `main`.

1. The failure-free run (unless --no-baseline): the same command for the same time.
2. The run under faults: from its first row on, at random intervals (seeded), a SIGKILL of
   a random component (tests/soak/chaos.py); a killed driver is started again with the same
   command, once everything of the killed launch is gone. With the Warden layer
   (tests/soak/warden.py), its worker and the Temporal dev server are victims too, and
   faults are injected into its fake fleet meanwhile.
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
    def __init__(self, seed: int, fault_every: float, spare: tuple[str, ...] = ()):
        self.seed, self.rng, self.fault_every = seed, random.Random(seed), fault_every
        self.spare = spare
        """Kinds never killed (`--spare`)."""
        self.t0 = time.monotonic()
        self.seen: dict[tuple[int, int], procs.Proc] = {}
        """Every process seen below the soak: (pid, start) -> Proc."""
        self.of_launch: dict[int, dict[tuple[int, int], procs.Proc]] = {}
        """The processes seen below each launch's driver (by the driver's pid)."""
        self.own: set[int] = set()
        """The soak's own children, which their Popen waits for (never reaped here)."""

    def say(self, line: str) -> None:
        print(f"t=+{time.monotonic() - self.t0:7.1f}s {line}", flush=True)

    def watch(self, runs: list[Run], sync=None, warden=None) -> dict[int, procs.Proc]:
        table = procs.snapshot()
        for pid in procs.descendants(os.getpid(), table):
            self.seen.setdefault((pid, table[pid].start), table[pid])
        for run in runs:
            driver = run.launches[-1].proc.pid
            mine = self.of_launch.setdefault(driver, {})
            for pid in procs.descendants(driver, table) | {driver} & set(table):
                mine.setdefault((pid, table[pid].start), table[pid])
        if sync is not None:
            self.own.add(sync.proc.pid)
        if warden is not None:
            self.own |= warden.pids()
        procs.reap(keep=self.own)
        return table

    def phase(
        self, runs: list[Run], minutes: float, faults: bool, sync=None, warden=None
    ) -> Outcome:
        """Every run of `runs` (and the synchronizer `sync`, a DiLoCo pair's; the Warden
        layer `warden`, started, its fleet's faults injected) for `minutes`, under faults or
        not; then stopped and checked for what outlived it."""
        rng = random.Random(f"kinds-{self.seed}")
        outcome, deck = Outcome(), chaos.Deck(rng, bool(sync), self.spare, warden is not None)
        for run in runs:
            self.launch(run)
        deadline = runs[0].launches[0].started + minutes * 60
        next_fault = None
        while time.monotonic() < deadline:
            table = self.watch(runs, sync, warden)
            for run in runs:
                self.tend(run, outcome)
            for line in warden.tend() if warden is not None else []:
                self.say(line)
            if sync is not None and sync.proc.poll() is not None:
                outcome.problems.append(
                    f"the synchronizer ended by itself: exit {sync.proc.returncode}"
                )
                self.say(f"synchronizer: ended by itself; again: {sync.start()}")
            if faults and next_fault is None and any(run.metrics.exists() for run in runs):
                next_fault = time.monotonic() + chaos.interval(self.rng, self.fault_every)
            elif faults and next_fault is not None and time.monotonic() >= next_fault:
                self.fault(deck, runs, (sync, warden), table, outcome)
                next_fault = time.monotonic() + chaos.interval(self.rng, self.fault_every)
            time.sleep(POLL_S)
        outcome.committed = sum(check(run.segments()[0]).committed for run in runs)
        outcome.seconds = minutes * 60
        for run in runs:
            self.until_trained(run, runs, outcome)
        for run in runs:
            self.stop(run, runs, outcome)
        if sync is not None:
            sync.stop()
        return outcome

    def tend(self, run: Run, outcome: Outcome) -> None:
        """Print a launch's first line; start a driver that ended by itself again."""
        self.announce(run)
        code = run.launches[-1].proc.poll()
        if code is None:
            return
        self.say(f"{run.name}: the driver ended by itself: exit {code}")
        if code != 3:  # 3: ft below its minimum of replicas (two faults too close)
            outcome.problems.append(
                f"{run.name}: launch {len(run.launches)} ended with exit {code}"
            )
        self.relaunch(run, outcome)

    def until_trained(self, run: Run, runs: list[Run], outcome: Outcome) -> None:
        """Wait (at most FIRST_ROW_S) for the last launch's first row before the stop: a
        resumed launch shows the rows it resumed with (a stop during start-up is another
        drill: tests/driver/test_interrupt.py)."""
        deadline = time.monotonic() + FIRST_ROW_S
        while not run.segments()[0][-1].steps and run.launches[-1].proc.poll() is None:
            if time.monotonic() > deadline:
                outcome.problems.append(f"{run.name}: launch {len(run.launches)} had no row in "
                                        f"{FIRST_ROW_S:.0f} s")  # fmt: skip
                return
            self.watch(runs)
            self.announce(run)
            time.sleep(POLL_S)

    def launch(self, run: Run) -> Launch:
        launch = run.start()
        self.own.add(launch.proc.pid)
        self.say(f"{run.name}: launch {len(run.launches)}: driver pid {launch.proc.pid}"
                 f" (newest committed checkpoint: step {launch.expected})")  # fmt: skip
        return launch

    def announce(self, run: Run) -> None:
        """Print a launch's first line once it has one (a resumed run's says from where)."""
        launch = run.launches[-1]
        if not launch.announced and (line := run.first_line(launch)):
            launch.announced = True
            self.say(f"{run.name}: launch {len(run.launches)} says: {line[:150]}")

    def fault(self, deck, runs: list[Run], own, table, outcome: Outcome) -> None:
        """SIGKILL the deck's next kind; `own`: (the synchronizer, the Warden layer), each
        None when the phase has none."""
        sync, warden = own
        targets: dict[str, list] = {}
        for run in runs:
            for kind, pids in chaos.victims(run.launches[-1].proc.pid, table).items():
                targets.setdefault(kind, []).extend((run, pid) for pid in pids)
        if sync is not None and sync.proc.poll() is None:
            targets[chaos.SYNCHRONIZER] = [(None, sync.proc.pid)]
        for kind, pids in warden.victims().items() if warden is not None else []:
            targets[kind] = [(None, pid) for pid in pids]
        picked = deck.choose(targets)
        if picked is None:
            return
        kind, (run, pid) = picked
        outcome.faults += 1
        line = table[pid].cmdline[:70] if pid in table else ""
        self.say(f"fault {outcome.faults}: SIGKILL {kind} pid {pid} ({line})")
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            self.say(f"  pid {pid} had already ended")
        if kind == chaos.SYNCHRONIZER:
            sync.proc.wait()
            self.say(f"synchronizer: started again: {sync.start()}")
        elif kind in chaos.WARDEN:
            self.say(warden.restart(kind))
            self.own |= warden.pids()
        elif kind == chaos.DRIVER:
            run.launches[-1].proc.wait()
            self.relaunch(run, outcome)

    def relaunch(self, run: Run, outcome: Outcome) -> Launch:
        """The same command again, once everything of the launch before has ended."""
        old = run.launches[-1]
        left = self.wait_gone(self.of_launch.get(old.proc.pid, {}).values())
        if left:
            which = f"{run.name}'s launch {len(run.launches)}"
            outcome.problems.append(f"{len(left)} processes of {which} outlived it: {names(left)}")
            kill(left)
        return self.launch(run)

    def stop(self, run: Run, runs: list[Run], outcome: Outcome) -> None:
        launch = run.launches[-1]
        self.watch(runs)
        self.say(f"{run.name}: time is up: SIGTERM to the driver")
        asked = time.monotonic()
        launch.proc.send_signal(signal.SIGTERM)
        try:
            code = launch.proc.wait(STOP_S)
        except Exception:  # noqa: BLE001 (subprocess.TimeoutExpired)
            outcome.problems.append(f"{run.name}: the driver did not stop within {STOP_S:.0f} s "
                                    "of SIGTERM")  # fmt: skip
            launch.proc.kill()
            code = launch.proc.wait()
        self.say(f"{run.name}: the driver stopped: exit {code} after {time.monotonic() - asked:.0f}"
                 f" s; last row: step {check(run.segments()[0]).committed}, newest committed "
                 f"checkpoint: step {run.newest_checkpoint()}")  # fmt: skip
        if code not in (0, 143):
            outcome.problems.append(f"{run.name}: the last launch ended with exit {code} after "
                                    "SIGTERM")  # fmt: skip
        left = self.wait_gone(self.of_launch.get(launch.proc.pid, {}).values())
        if left:
            outcome.problems.append(f"{len(left)} processes outlived {run.name}'s stopped "
                                    "driver: " + names(left))  # fmt: skip
            kill(left)

    def end_all(self) -> int:
        """SIGKILL every process below the soak (its own interruption: the runs are in
        sessions of their own, which a terminal's Ctrl-C does not reach); how many."""
        table = procs.snapshot()
        left = [table[pid] for pid in procs.descendants(os.getpid(), table)]
        kill(left)
        self.wait_gone(left)
        procs.reap(keep=set())
        return len(left)

    def wait_gone(self, seen) -> list[procs.Proc]:
        seen = list(seen)
        deadline = time.monotonic() + GONE_S
        while (left := procs.alive(seen)) and time.monotonic() < deadline:
            procs.reap(keep=self.own)
            time.sleep(0.5)
        procs.reap(keep=self.own)
        return left


def names(left: list[procs.Proc]) -> str:
    return ", ".join(f"{p.pid} {p.cmdline[:40]}" for p in left[:5])


def kill(left: list[procs.Proc]) -> None:
    for proc in left:
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
