"""What counts as "every committed step has exactly one metrics row" across the soak's
restarts (scripts/soak, docs/soak.md), as pure functions of the metrics file.

The run's metrics.jsonl is appended to by every launch of the driver, in turn (the soak
starts a launch only once everything of the one before is gone). A launch is the run of
one driver process; under torchft a lost worker is replaced inside a launch, and the rows
of record go on from the next step (a copy backfills a step whose writer died:
driver.metrics.records). So a launch's rows are its `Segment`: the lines it appended, and
the step it resumed from (its first line, `resuming <team>/<name> from step N: ...`; 0 when
it started afresh).

    verdict = check([Segment(0, [1, 2, ..., 37]), Segment(30, [31, 32, ..., 80])])
    segments = split(resumed, rows)        # a launch's rows, cut where Ray Train restarted
    verdict.committed, verdict.replayed, verdict.problems

- Within a segment the steps run on one by one: each step once, none skipped (a second row
  of a step in one launch is a duplicate; a gap is a lost row).
- A resumed segment starts at the step after its checkpoint: `resumed + 1` (a row of a step
  the checkpoint holds would be a duplicate; one further on, a loss), and its checkpoint is
  one the launches before reached (a checkpoint ahead of every row means rows were lost).
- The steps after that checkpoint that an earlier launch had already rowed are *replayed*:
  that launch was killed before it saved them, so they were not committed, and the resumed
  launch runs them again; their rows of record are the resumed launch's. Counted, not a
  failure.
- Without torchft (a DiLoCo learner), a lost worker makes Ray Train start the worker group
  again inside the launch from the newest checkpoint: a new attempt whose first row goes
  back is a segment of its own, resumed from the step before that row (`split`: not
  checked against the checkpoint, which no line names).
- The committed steps are 1 .. the last segment's last step (the step it resumed from, when
  it was stopped before its first row: the rows after it will be run again): each has
  exactly one row of record, the one of the newest launch that rowed it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field


@dataclass
class Segment:
    resumed: int
    """The checkpoint step the launch resumed from (0: it started afresh)."""
    steps: list[int]
    """The steps of its rows, in the order it appended them."""


@dataclass
class Verdict:
    committed: int = 0
    """Steps 1 .. committed survive and have exactly one row of record each (when no
    problem)."""
    replayed: int = 0
    """Rows of steps a killed launch had not saved, run again by the next."""
    problems: list[str] = field(default_factory=list)


def check(segments: list[Segment]) -> Verdict:
    verdict = Verdict()
    rowed = 0  # the furthest step rowed by the newest launch that rowed any
    for index, segment in enumerate(segments, 1):
        name = f"launch {index}"
        if segment.resumed > rowed:
            verdict.problems.append(f"{name} resumed from step {segment.resumed}, but the rows "
                                    f"reached only step {rowed}: rows lost")  # fmt: skip
        verdict.committed = segment.resumed  # what survives of the launches before it
        if not segment.steps:  # killed or stopped before its first row
            continue
        first = segment.steps[0]
        if first != segment.resumed + 1:
            verdict.problems.append(f"{name} resumed from step {segment.resumed} but its first "
                                    f"row is step {first}")  # fmt: skip
        verdict.problems += [f"{name}: {line}" for line in runs_on(segment.steps)]
        verdict.replayed += max(0, min(rowed, segment.steps[-1]) - segment.resumed)
        rowed = verdict.committed = segment.steps[-1]
    return verdict


def runs_on(steps: list[int]) -> list[str]:
    """What is wrong with a launch's steps, that must run on one by one."""
    problems = []
    for before, after in zip(steps, steps[1:], strict=False):
        if after == before:
            problems.append(f"step {after} has two rows")
        elif after < before:
            problems.append(f"step {after} rowed again after step {before}")
        elif after > before + 1:
            problems.append(f"steps {before + 1}..{after - 1} have no row")
    return problems


def read_rows(data: bytes) -> tuple[list[tuple[int, int]], int]:
    """((step, attempt) of each whole row in a launch's part of a metrics file, in order;
    torn lines: a launch killed while it wrote a row leaves part of it)."""
    rows, torn = [], 0
    for line in data.splitlines():
        try:
            row = json.loads(line)
            rows.append((int(row["step"]), int(row.get("attempt", 0))))
        except (ValueError, KeyError, TypeError, AttributeError):
            torn += 1
    return rows, torn


def split(resumed: int, rows: list[tuple[int, int]]) -> list[Segment]:
    """A launch's rows as segments: without torchft, a lost worker makes Ray Train start
    the worker group again inside the launch, from the newest checkpoint (a new attempt
    whose first step is not after the last): its rows are a segment of their own, resumed
    from the step before its first row."""
    segments = [Segment(resumed, [])]
    last_attempt = None
    for step, attempt in rows:
        steps = segments[-1].steps
        if steps and last_attempt is not None and attempt > last_attempt and step <= steps[-1]:
            segments.append(Segment(step - 1, []))
        segments[-1].steps.append(step)
        last_attempt = attempt
    return segments


LOSS_REL = 1e-3
"""How far a faulted run's loss may be from the failure-free run's at the same step. With
`ft.constant_batch` every step trains the same samples whatever the faults; what differs is
the order of the sums (a survivor runs a lost group's micro-batches), which moves the loss
by ~1e-6 a step and grows slowly with the steps (docs/soak.md)."""


def losses(data: bytes) -> dict[int, float]:
    """Step -> the loss of its row of record in a metrics file: the last whole row of the
    step (a resumed launch's row replaces the row a killed launch never committed)."""
    found = {}
    for line in data.splitlines():
        try:
            row = json.loads(line)
            found[int(row["step"])] = float(row["loss"])
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
    return found


def same_curve(faulted: dict[int, float], base: dict[int, float],
               rel: float = LOSS_REL) -> tuple[bool, str]:  # fmt: skip
    """Whether the faulted run's loss equals the failure-free run's within `rel` at every
    step both rowed; and the text of the check."""
    common = sorted(set(faulted) & set(base))
    if not common:
        return False, "no step in common with the failure-free run"
    gaps = {s: abs(faulted[s] - base[s]) / max(abs(base[s]), 1e-12) for s in common}
    worst = max(common, key=lambda s: gaps[s])
    off = [s for s in common if not gaps[s] <= rel]  # a NaN counts as off
    text = (f"{len(common)} steps in common, largest relative loss difference "
            f"{gaps[worst]:.1e} at step {worst} (bound {rel:g})")  # fmt: skip
    if off:
        text += f"; first beyond the bound: step {off[0]}"
    return not off, text
