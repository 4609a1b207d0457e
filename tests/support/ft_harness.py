"""Run a drill (tests.support.ft_drill) as real processes: a Lighthouse here, one process per
replica group, SIGKILLs on schedule, groups (re)started on request.

    result = Drill(tmp, groups=3, steps=12, kills={2: (5, "during")}).run()
    result.rows[0]          # group 0's committed steps, in order
    result.codes, result.stderr

Used by tests/ft and scripts/bench/ft_bench.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests import support

LATE_S = 10.0
"""Once a group committed the last step, a process that has not (a joiner that never gets a
quorum) is killed this much later; one that has is exiting (a torch process takes seconds
to end on a busy machine) and is waited for up to the drill's timeout."""


@dataclass
class DrillResult:
    rows: dict[str, list[dict]]
    """Per process name (`g0`, `g2b` for a restarted group 2, ...): its committed steps."""
    codes: dict[str, int | None]
    """Exit codes (None: killed by the harness at the deadline)."""
    stderr: dict[str, str]
    killed_at: dict[str, float] = field(default_factory=dict)
    """Wall time of each self-inflicted SIGKILL."""
    killed_step: dict[str, int] = field(default_factory=dict)
    """The step (0-based) each SIGKILL struck."""
    started: float = 0.0
    ended: float = 0.0


@dataclass
class Drill:
    folder: Path
    groups: int
    steps: int
    kills: dict[int, tuple[int, str]] = field(default_factory=dict)
    """group -> (step, phase) at which it SIGKILLs itself."""
    rejoin: dict[int, int] = field(default_factory=dict)
    """group -> step of the survivors after which (and after the group's process is gone) a
    fresh process of it starts and heals."""
    spec: dict = field(default_factory=dict)
    """Extra drill spec keys (grad_accum, micro_batch, ft, ckpt_root, ...)."""
    hold: bool = True
    """Survivors wait for a rejoining group to be ready (tests); False: they train on and
    the group joins whenever it is ready (the benchmark)."""
    mode: str = "ft"
    timeout_s: float = 240.0

    def _start(self, name: str, group: int, extra: dict, env: dict) -> subprocess.Popen:
        spec = {
            "mode": self.mode,
            "group": group,
            "groups": self.groups,
            "steps": self.steps,
            "out": str(self.folder / f"{name}.jsonl"),
            **self.spec,
            **extra,
        }
        if group in self.kills and not name.endswith("b"):
            spec["kill_step"], spec["kill_phase"] = self.kills[group]
        for joiner, after in self.rejoin.items() if self.hold else ():  # wait for it once
            spec.update(hold_step=after, hold_file=str(self.folder / f"g{joiner}b.ready"))
        if name.endswith("b"):
            spec["ready_file"] = str(self.folder / f"{name}.ready")
        path = self.folder / f"{name}.json"
        path.write_text(json.dumps(spec))
        err = open(self.folder / f"{name}.err", "w")  # noqa: SIM115 (closed with the process)
        cmd = [sys.executable, "-X", "faulthandler", "-m", "tests.support.ft_drill", str(path)]
        return subprocess.Popen(  # faulthandler: a native crash shows every thread's stack
            cmd,
            stdout=err,
            stderr=subprocess.STDOUT,
            env=env,
        )

    def run(self) -> DrillResult:
        from driver.config.ft import FtConfig

        self.folder.mkdir(parents=True, exist_ok=True)
        env = support.env()
        side, store, extra = None, None, {}
        if self.mode == "ft":
            from driver.ft.lighthouse import DriverSide

            cfg = FtConfig.from_dict({"enabled": True, **self.spec.get("ft", {})})
            side = DriverSide(cfg, self.groups)
            extra = {"lighthouse": side.lighthouse_addr, "gate": side.gate_addr}
        else:
            from torch.distributed import TCPStore

            store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
            extra = {"store": f"127.0.0.1:{store.port}"}
        started = time.time()
        procs = {f"g{g}": self._start(f"g{g}", g, extra, env) for g in range(self.groups)}
        pending = dict(self.rejoin)
        deadline, late = time.monotonic() + self.timeout_s, None
        try:
            while any(p.poll() is None for p in procs.values()) and time.monotonic() < deadline:
                if late is None and self._committed(self.steps):
                    late = time.monotonic() + LATE_S
                if late and time.monotonic() > late and not self._ending(procs):
                    break  # only late joiners left, waiting for a quorum that will not come
                if self.mode == "ddp" and any(p.poll() not in (None, 0) for p in procs.values()):
                    break  # as Ray Train tears the worker group down on a worker's failure
                for group, after in list(pending.items()):
                    gone = procs[f"g{group}"].poll() is not None  # never two of one group
                    if gone and self._committed(after):
                        procs[f"g{group}b"] = self._start(f"g{group}b", group, extra, env)
                        del pending[group]
                time.sleep(0.05)
        finally:
            for p in procs.values():
                if p.poll() is None:
                    p.kill()
                    p.wait()
            if side:
                side.shutdown()
        return self._collect(procs, started)

    def _ending(self, procs: dict) -> list[str]:
        """The processes still running that committed the last step (they are exiting)."""
        return [
            name
            for name, p in procs.items()
            if p.poll() is None and self._committed(self.steps, f"{name}.jsonl")
        ]

    def _committed(self, step: int, pattern: str = "g*.jsonl") -> bool:
        for path in self.folder.glob(pattern):
            lines = path.read_text().splitlines()
            if lines and json.loads(lines[-1])["step"] >= step:
                return True
        return False

    def _collect(self, procs: dict, started: float) -> DrillResult:
        rows, codes, errs, killed, killed_step = {}, {}, {}, {}, {}
        for name, p in procs.items():
            out = self.folder / f"{name}.jsonl"
            text = out.read_text() if out.exists() else ""
            rows[name] = [json.loads(line) for line in text.splitlines() if line.strip()]
            codes[name] = p.returncode
            errs[name] = (self.folder / f"{name}.err").read_text()
            mark = Path(str(out) + ".killed")
            if mark.exists():
                when, step = mark.read_text().split()
                killed[name], killed_step[name] = float(when), int(step)
        return DrillResult(rows, codes, errs, killed, killed_step, started, time.time())
