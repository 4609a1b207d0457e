"""One row of record per step on the driver, when copies may arrive (torchft).

Under torchft another rank sends copies of recent rows of record when the step's writer
may have lost its own (driver.ft.records; `driver.metrics.rank.COPY`). `RecordBook.admit`
decides, in place, on each drained batch before the writers see it:

- a copy of a step that has no row of record yet becomes it (its flag is cleared and
  `backfilled` set, so metrics.jsonl shows where it came from); a copy of a step that has
  one stays a copy: every writer but metrics.jsonl may store it (the store keeps one value
  per rank, step and metric), and `of_record` leaves it out;
- a writer's own row that arrives after a copy was admitted for its step, and was
  committed before that (a writer that was late rather than dead), becomes a copy too;
  a row committed after the admission is a step run again (a restart) and is kept.

    book = RecordBook()
    book.admit(rows)        # then of_record(row) is True for one row per step

Only the newest `KEEP` steps are remembered: copies cover the last few hundred steps.
"""

from __future__ import annotations

import time

from driver.metrics.rank import COPY

KEEP = 4096
BACKFILLED = "backfilled"


class RecordBook:
    """The steps that have a row of record, and when a copy became one."""

    def __init__(self, keep: int = KEEP, clock=time.time):
        self.keep, self.clock = keep, clock
        self.steps: dict[int, float | None] = {}
        """step -> when a copy was admitted as its row of record (None: the writer's own)."""

    def admit(self, rows: list[dict]) -> None:
        for row in rows:
            if "loss" not in row:
                continue
            step = int(row["step"])
            if row.get(COPY):
                if step not in self.steps:
                    del row[COPY]
                    row[BACKFILLED] = True
                    self._note(step, self.clock())
            elif (admitted := self.steps.get(step)) is not None and row["time"] < admitted:
                row[COPY] = True
            else:
                self._note(step, None)

    def _note(self, step: int, when: float | None) -> None:
        self.steps[step] = when
        if len(self.steps) > 2 * self.keep:
            newest = sorted(self.steps)[-self.keep :]
            self.steps = {s: self.steps[s] for s in newest}
