"""Pure rules of the checkpoint layout: paths, commit markers, retention and clean-up.

    <root>/<team>/<run>/step-<n>/        one checkpoint (DCP shards + .metadata)
    <root>/<team>/<run>/step-<n>/COMMITTED   written last; only then is the step resumable

No I/O here; `driver.checkpoint.storage` applies these decisions. Table tests:
tests/checkpoint/test_layout.py.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

MARKER = "COMMITTED"
METADATA = ".metadata"
_STEP_DIR = re.compile(r"^step-(\d+)$")


def join(*parts: str) -> str:
    """Join URI/path parts with single slashes (`gs://b` + `team` -> `gs://b/team`)."""
    head, *rest = parts
    out = head.rstrip("/") if head not in ("/", "") else head
    for part in rest:
        part = part.strip("/")
        if part:
            out = f"{out}/{part}" if out not in ("", "/") else f"{out}{part}"
    return out


def run_uri(root: str, team: str, run: str) -> str:
    """`<root>/<team>/<run>`: where every checkpoint of one run lives."""
    for name, value in (("team", team), ("run", run)):
        if not value or "/" in value or value in (".", ".."):
            raise ValueError(f"checkpoint {name} must be a plain name, got {value!r}")
    return join(root, team, run)


def step_dir(step: int) -> str:
    """Directory name of one checkpoint: `step-<n>`."""
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    return f"step-{step}"


def parse_step(name: str) -> int | None:
    """`step-120` -> 120; anything else (temp files, other runs' names) -> None."""
    match = _STEP_DIR.match(name.rstrip("/").rsplit("/", 1)[-1])
    return int(match.group(1)) if match else None


def step_of_uri(uri: str) -> int | None:
    """The step a checkpoint URI points at, from its last path component."""
    return parse_step(uri)


@dataclass(frozen=True)
class Marker:
    """Contents of the commit marker: enough to check, describe and authenticate a
    checkpoint (`driver.checkpoint.auth` signs it)."""

    step: int
    world_size: int
    files: dict[str, int]
    """Every file of the checkpoint (name -> size in bytes) when it was committed."""
    write_s: float
    """Seconds from the start of staging to the last byte written."""
    created: float
    """Unix time of the commit."""
    team: str = ""
    """Team and run the checkpoint belongs to (part of what the MAC covers)."""
    run: str = ""
    digests: dict[str, str] = field(default_factory=dict)
    """SHA-256 of the files loading unpickles (DCP's `.metadata`)."""
    mac: str = ""
    """HMAC-SHA256 of everything above with the run's checkpoint key (hex)."""

    def dumps(self, with_mac: bool = True) -> str:
        data = dict(self.__dict__)
        if not with_mac:
            data.pop("mac")
        return json.dumps(data, sort_keys=True)

    @classmethod
    def loads(cls, text: str) -> Marker:
        data = json.loads(text)
        return cls(
            step=int(data["step"]),
            world_size=int(data["world_size"]),
            files={str(k): int(v) for k, v in data["files"].items()},
            write_s=float(data["write_s"]),
            created=float(data["created"]),
            team=str(data.get("team", "")),
            run=str(data.get("run", "")),
            digests={str(k): str(v) for k, v in data.get("digests", {}).items()},
            mac=str(data.get("mac", "")),
        )


def file_problems(expected: dict[str, int], found: dict[str, int]) -> list[str]:
    """What differs between the files a marker lists and the files present (sizes in bytes)."""
    problems = []
    for name, size in sorted(expected.items()):
        if name not in found:
            problems.append(f"{name} is missing")
        elif found[name] != size:
            problems.append(f"{name} has {found[name]} bytes, {size} when committed")
    return problems


def newest_committed(steps: dict[int, bool]) -> int | None:
    """The highest step whose checkpoint is committed (`steps`: step -> committed)."""
    committed = [step for step, ok in steps.items() if ok]
    return max(committed) if committed else None


def retained(committed: list[int], keep_last: int, keep_every: int) -> set[int]:
    """Committed steps the retention policy keeps: the newest `keep_last` (0: all) plus
    every step that is a multiple of `keep_every` (0: none)."""
    ordered = sorted(set(committed))
    keep = set(ordered if keep_last == 0 else ordered[-keep_last:])
    if keep_every > 0:
        keep |= {step for step in ordered if step % keep_every == 0}
    return keep


def to_delete(
    steps: dict[int, bool],
    keep_last: int,
    keep_every: int,
    in_flight: set[int] = frozenset(),
    startup: bool = False,
) -> list[int]:
    """Step directories to remove.

    Committed ones outside the retention policy go. Uncommitted ones are partial writes:
    at start-up (no writer of this run is alive) every one goes; while running, only those
    older than the newest committed step and not being written now.
    """
    committed = [step for step, ok in steps.items() if ok]
    keep = retained(committed, keep_last, keep_every)
    newest = newest_committed(steps)
    doomed = []
    for step, ok in steps.items():
        if step in in_flight:
            continue
        if ok and step not in keep:
            doomed.append(step)
        elif not ok and (startup or (newest is not None and step < newest)):
            doomed.append(step)
    return sorted(doomed)


def save_due(step: int, interval_steps: int, last_saved: int | None) -> bool:
    """Whether the loop should checkpoint after `step`."""
    if interval_steps <= 0 or step <= 0 or step == last_saved:
        return False
    return step % interval_steps == 0
