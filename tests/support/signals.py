"""What a test that sends a signal says when the signal did not act: every process of the
tree, whether it ignores, blocks, catches or has pending SIGINT and SIGTERM, and where it
sleeps in the kernel (from /proc).

    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running after SIGINT:\n{describe_tree(proc.pid)}")
"""

from __future__ import annotations

import os
import signal

from tests.soak.procs import descendants, read_proc, snapshot

WATCHED = {"INT": signal.SIGINT, "TERM": signal.SIGTERM}
MASKS = ("SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt")


def masks(status: str) -> dict[str, int]:
    """The signal masks of a /proc/<pid>/status text, as integers."""
    found = {}
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key in MASKS:
            found[key] = int(value.strip(), 16)
    return found


def signal_summary(found: dict[str, int]) -> str:
    """`INT: ignored, TERM: caught` for the watched signals: which masks hold each."""
    parts = []
    for name, number in WATCHED.items():
        held = [key for key in MASKS if found.get(key, 0) >> (number - 1) & 1]
        parts.append(f"{name}: {'+'.join(held) or 'default'}")
    return ", ".join(parts)


def describe(pid: int) -> str:
    proc = read_proc(pid)
    if proc is None:
        return f"{pid}: gone"
    try:
        with open(f"/proc/{pid}/status") as handle:
            status = handle.read()
        with open(f"/proc/{pid}/wchan") as handle:
            wchan = handle.read().strip() or "-"
    except OSError:
        status, wchan = "", "?"
    return (
        f"{pid} (parent {proc.ppid}) state {proc.state} in {wchan}; "
        f"{signal_summary(masks(status))}; {proc.cmdline[:160]}"
    )


def describe_tree(root: int) -> str:
    """One line per process: `root` and every process below it."""
    pids = [root, *sorted(descendants(root, snapshot()))]
    return "\n".join(describe(pid) for pid in pids)


def kill_tree(root: int) -> None:
    """SIGKILL `root` and every process below it (a test never leaves them running)."""
    for pid in [root, *descendants(root, snapshot())]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
