"""A worker's unsent rows leave before Ray Train tears it down (driver.metrics.teardown).
End to end: tests/ui/test_local_run_ranks.py (the rank that did not fail keeps the rows of
every attempt)."""

from __future__ import annotations

from driver.metrics import rank
from driver.metrics.teardown import LeaveRowsCallback, with_rows_kept
from driver.raytrain import trainer_class
from tests.driver.test_metrics import FakeSink


def row(step: int) -> dict:
    return {"step": step, "step_time": 0.1, "time": 1.0}


def test_the_shutdown_hook_sends_every_live_reporters_rows_and_waits_for_the_driver():
    sinks = [FakeSink(), FakeSink()]
    reporters = [rank.RankReporter(s, i, 0, every_s=3600, idle_s=3600) for i, s in enumerate(sinks)]
    try:
        for reporter in reporters:
            reporter.add(row(5))  # then blocked in a collective: the thread has not pushed
        assert all(s.rows == [] for s in sinks)
        LeaveRowsCallback().before_worker_shutdown()
        assert all([r["step"] for r in s.rows] == [5] and s.synced == 1 for s in sinks)
        LeaveRowsCallback().before_worker_shutdown()  # nothing new: nothing sent again
        assert all(len(s.rows) == 1 for s in sinks)
    finally:
        for reporter in reporters:
            reporter.flush()


def test_a_flushed_reporter_is_left_alone():
    sink = FakeSink()
    reporter = rank.RankReporter(sink, 0, 0, every_s=3600, idle_s=3600)
    reporter.flush()
    LeaveRowsCallback().before_worker_shutdown()
    assert sink.synced == 1  # flush's own sync, none from the hook


class _Base:
    def _create_default_callbacks(self):
        return ["ray's own"]


def test_the_hook_comes_first_among_the_default_callbacks():
    callbacks = with_rows_kept(_Base)()._create_default_callbacks()
    assert isinstance(callbacks[0], LeaveRowsCallback) and callbacks[1:] == ["ray's own"]


def test_the_trainer_class_carries_the_hook():
    from ray.train import ScalingConfig

    cls = trainer_class()
    kwargs = {"scaling_config": ScalingConfig(num_workers=1)}
    trainer = cls(lambda: None, **kwargs)
    callbacks = trainer._create_default_callbacks()
    assert isinstance(callbacks[0], LeaveRowsCallback), callbacks
