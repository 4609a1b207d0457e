"""The end of a torchft run, for the trainer's FtStepper (docs/ft.md, "End of run").

- The group that commits the last step marks `DONE_KEY` in the start gate's store. A group
  checks it before its first step and after every quorum (`finished`): a replacement that arrives
  after the end, or a group that formed a quorum without the groups that finished, stops without
  training (driver.trainer.loop.RunFinished); FtStopped while the run is done is not a failure.
- The writer of the last step marks its rows, final save and final figures in
  (driver.ft.records.mark_recorded); the next group in line waits for that mark and, without
  it, sends its copies of the rows and the final figures (`hand_over_at_end`).
- No worker calls `ray.train.report` under ft (driver.trainer.worker): in Ray Train 2.60
  it is a barrier of every worker, and a group replaced after the last step waited there
  for peers that had already returned, so the run never ended.
"""

from __future__ import annotations

from driver.ft.records import wait_recorded

DONE_KEY = "ft/done"


class RunEnd:
    """How this group's loop ended: `reports` when it sends the run's final figures (it
    wrote the last step, or took over from a writer that died at the end)."""

    reports: bool = False
    took_over: bool = False
    """It reports because the writer of the last step left no mark (records.py)."""


def finished(done) -> bool:
    """Whether a group has committed the run's last step (the done mark)."""
    return done is not None and bool(done.check([DONE_KEY]))


def hand_over_at_end(ft, done, wrote: bool, copies, reporter, logger) -> bool:
    """After the last step: mark the run done; the next group in line (position 1) waits
    for the writer's mark (driver.ft.records) and, without it, sends its copies and the
    run's final figures (the final save stays the writer's: never two writers of one
    checkpoint). Whether this rank reports the run's final figures."""
    if done is None:
        return wrote
    done.set(DONE_KEY, str(ft.step))
    plan = getattr(ft, "plan", None)
    if wrote or plan is None or plan.position != 1:
        return wrote
    if wait_recorded(done, ft.step):
        return False
    logger.warning("ft: the writer of step %d is gone; this group sends its rows", ft.step)
    for copy in copies.pending():  # the final save stays the writer's (never two writers)
        reporter.add(copy, full=True)
    return True
