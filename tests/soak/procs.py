"""The soak's view of its own processes, from /proc: the tree below it, each process's
command line, and the soak process's own file descriptors and memory.

The soak makes itself a child subreaper (`become_subreaper`): a process whose parent dies
is handed to the soak rather than to init, so "below the soak" stays true for everything
it started, however its parents died, and a victim is only ever chosen among the soak's
own descendants (other Ray clusters on the machine are never touched). Orphans handed to
it that end are reaped by `reap`.

    become_subreaper()
    table = snapshot()                        # {pid: Proc}
    below = descendants(os.getpid(), table)   # pids
    alive(seen)                               # those of `seen` (Procs) still running
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass

PR_SET_CHILD_SUBREAPER = 36


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    start: int
    """Start time in clock ticks after boot: (pid, start) names one process for good."""
    state: str
    cmdline: str


def become_subreaper() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def read_proc(pid: int) -> Proc | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read().decode(errors="replace")
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            cmdline = handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after the command name, which may hold spaces
    return Proc(pid, int(fields[1]), int(fields[19]), fields[0], cmdline)


def snapshot() -> dict[int, Proc]:
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            proc = read_proc(int(name))
            if proc is not None:
                table[proc.pid] = proc
    return table


def descendants(root: int, table: dict[int, Proc]) -> set[int]:
    """The processes below `root` (not `root` itself)."""
    children: dict[int, list[int]] = {}
    for proc in table.values():
        children.setdefault(proc.ppid, []).append(proc.pid)
    found, todo = set(), list(children.get(root, []))
    while todo:
        pid = todo.pop()
        found.add(pid)
        todo += children.get(pid, [])
    return found


def alive(seen) -> list[Proc]:
    """The processes of `seen` (Procs) still running (the same pid and start time, not a
    zombie)."""
    left = []
    for proc in seen:
        now = read_proc(proc.pid)
        if now is not None and now.start == proc.start and now.state != "Z":
            left.append(now)
    return left


def reap(keep: set[int]) -> None:
    """Reap the soak's ended children but `keep` (those a Popen waits for itself)."""
    me = os.getpid()
    for proc in snapshot().values():
        if proc.ppid == me and proc.state == "Z" and proc.pid not in keep:
            try:
                os.waitpid(proc.pid, os.WNOHANG)
            except ChildProcessError:
                continue


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def rss_bytes() -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0
