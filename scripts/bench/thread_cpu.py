"""CPU per thread of some processes over a stretch of work, from /proc (Linux):

    with ThreadCpu({"client": os.getpid(), "worker": pid}) as cpu:
        for _ in range(n):
            call()
    for line in cpu.lines(per=n):       # "worker: python 85.2 us, ZMQbg/IO/0 34.9 us"
        print(line)

Each thread's time on a CPU comes from `/proc/<pid>/task/<tid>/schedstat` (nanoseconds,
first field), named by its `comm` (threads of one name summed); threads that ran less
than `floor_us` per unit are left out of the lines. A thread that ends inside the stretch
is not counted.
"""

from __future__ import annotations

import os
from pathlib import Path


def threads(pid: int) -> dict[str, int]:
    """{"<comm>:<tid>": nanoseconds on a CPU} of every thread of `pid` now."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            out[f"{name}:{task.name}"] = int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended between the listing and the read
    return out


def per_unit(before: dict[str, int], after: dict[str, int], per: int) -> dict[str, float]:
    """Microseconds per unit of work of each thread, from two readings."""
    return {t: (ns - before.get(t, 0)) / per / 1000 for t, ns in after.items()}


class ThreadCpu:
    """Readings of `pids` ({label: pid}) on entry and on exit."""

    def __init__(self, pids: dict[str, int]):
        self.pids, self.before, self.after = pids, {}, {}

    def __enter__(self) -> ThreadCpu:
        self.before = {label: threads(pid) for label, pid in self.pids.items()}
        return self

    def __exit__(self, *exc) -> None:
        self.after = {label: threads(pid) for label, pid in self.pids.items()}

    def used(self, per: int) -> dict[str, dict[str, float]]:
        """{label: {thread name: us per unit}}, threads of one name summed."""
        out: dict[str, dict[str, float]] = {}
        for label in self.pids:
            named: dict[str, float] = {}
            for thread, us in per_unit(self.before[label], self.after[label], per).items():
                name = thread.rsplit(":", 1)[0]
                named[name] = named.get(name, 0.0) + us
            out[label] = named
        return out

    def lines(self, per: int, floor_us: float = 1.0) -> list[str]:
        return [
            f"{label}: "
            + ", ".join(
                f"{name} {us:.1f} us" for name, us in sorted(named.items()) if us >= floor_us
            )
            for label, named in self.used(per).items()
        ]


if __name__ == "__main__":  # a quick look at this process
    with ThreadCpu({"self": os.getpid()}) as probe:
        sum(range(1_000_000))
    print("\n".join(probe.lines(per=1)))
