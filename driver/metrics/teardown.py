"""A worker's last rows leave before Ray Train tears the worker down.

When one rank fails, Ray Train shuts the whole worker group down: it calls each worker
actor's `shutdown` (its worker callbacks' `before_worker_shutdown`, with up to 5 s of
patience), then kills it. A rank that did not fail is usually blocked in a collective by
then, and the rows it added since its sending thread last pushed would die with it (the
thread pushes 0.2 s after the newest row, later on a loaded machine).
`LeaveRowsCallback.before_worker_shutdown` sends them first (driver.metrics.rank.leave_all),
so every rank's rows of a failed attempt are kept, not only the failing rank's own.

    trainer_cls = with_rows_kept(DataParallelTrainer)   # driver.raytrain.trainer_class

Ray 2.60 (pinned in pyproject.toml): worker callbacks are the default callbacks that are
`WorkerCallback`s (`_create_default_callbacks`), sent to every worker with its train
context; a later Ray that renames either fails tests/driver/test_teardown.py.
"""

from __future__ import annotations

from ray.train.v2._internal.execution.callback import WorkerCallback

LEAVE_S = 3.0
"""How long the last rows may take to reach the driver: within Ray Train's 5 s."""


class LeaveRowsCallback(WorkerCallback):
    """Sends this worker's unsent rows before Ray Train tears it down."""

    def before_worker_shutdown(self) -> None:
        from driver.metrics.rank import leave_all

        leave_all(LEAVE_S)


def with_rows_kept(base: type) -> type:
    """A subclass of Ray Train's trainer `base` whose workers send their unsent rows before
    they are torn down (LeaveRowsCallback first among its default callbacks)."""

    class RowsKeptTrainer(base):
        def _create_default_callbacks(self):
            return [LeaveRowsCallback(), *super()._create_default_callbacks()]

    return RowsKeptTrainer
