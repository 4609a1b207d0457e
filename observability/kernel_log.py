"""A node's kernel log, as a process on the node may read it: `dmesg`, else `journalctl -k`.

    text, source = read()        # (the log, "dmesg"), or (None, "dmesg: ...; journalctl: ...")

The node checks (runner.preflight.kernel) parse it for Xids, ECC, NVLink and OOM kills; a
failed run's crash bundle keeps each node's (driver.output.crash_gather, nodes/<node>/kernel.log).
"""

from __future__ import annotations

import shutil
import subprocess

SOURCES = [["dmesg", "--nopager"], ["journalctl", "-k", "-b", "--no-pager", "-q"]]


def read(max_lines: int | None = None) -> tuple[str | None, str]:
    """The kernel log (its last `max_lines` lines) and where it came from; (None, reason)
    when it cannot be read."""
    reasons = []
    for command in SOURCES:
        if not shutil.which(command[0]):
            reasons.append(f"{command[0]} not installed")
            continue
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as err:
            reasons.append(f"{command[0]}: {err}")
            continue
        if done.returncode == 0 and done.stdout.strip():
            text = done.stdout
            if max_lines is not None:
                text = "\n".join(text.splitlines()[-max_lines:]) + "\n"
            return text, command[0]
        reasons.append(f"{command[0]}: {(done.stderr.strip() or 'empty').splitlines()[0]}")
    return None, "; ".join(reasons)
