"""Warden's periodic and one-off workflows (deterministic, no I/O):

- `SweepWorkflow` (ID `warden-sweep-<cluster>`): periodic detection, starting node workflows
  for findings and for nodes Warden cordoned earlier (the recovery sweep).
- `ShrinkWorkflow`: lower a RayCluster worker group after training dropped a replica group.
- `GrowWorkflow` (ID `warden-grow-<cluster>`): every `grow_period_s`, raise the worker
  groups Warden shrank again when capacity for them returns (`warden.scaling`).
- `KeepWorkflow` (ID `warden-keep-<cluster>`): every `keep_period_s`, keep the nodes of
  finished RayJobs that asked for it for their namespace, and release them when the time is
  up (`warden.keep`).
- `StragglerWorkflow` (ID `warden-stragglers-<cluster>`): every `straggler_period_s`, hand
  the nodes of persistent NCCL stragglers in ClickHouse to their node check
  (`warden.stragglers`).

The four periodic ones share one loop, `periodic`: a round, its failure recorded
(`warden.policy.report`) and counted while the next round runs as usual, a timer,
continue-as-new every `sweeps_per_run` rounds. A failed shrink is recorded and fails the
workflow, so its caller knows. The histories these loops wrote before `periodic` replay on
it (tests/warden/test_replay.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from warden.activities import WardenActivities as A
    from warden.model import (
        DetectInput,
        DispatchInput,
        GrowInput,
        GrowResult,
        KeepInput,
        KeepResult,
        ShrinkInput,
        ShrinkResult,
        StragglerInput,
        StragglerResult,
        SweepInput,
        SweepResult,
        Timings,
    )
    from warden.policy import FAILED, long_options, options, report

T = TypeVar("T")


async def periodic(
    t: Timings,
    period_s: float,
    limit: int,
    total: T,
    one_round: Callable[[int], Awaitable[None]],
    again: Callable[[int], object],
    count: str = "rounds",
) -> T:
    """Every `period_s`, `await one_round(n)` (n: rounds this run did before) and count it
    in `total.<count>`; a round an error stops is recorded and counted in `total.failed`.
    With `limit` > 0, return `total` after that many rounds; every `t.sweeps_per_run`
    rounds, continue as new with `again(rounds left, or 0 for forever)`.

    The commands, in order (replay depends on them): the round's activities, `report_failure`
    if it failed, then continue-as-new or the timer."""
    while True:
        done = getattr(total, count)
        try:
            await one_round(done)
        except FAILED as err:
            total.failed += 1
            await report(t, "", f"{workflow.info().run_id}-{done}", err)
        done += 1
        setattr(total, count, done)
        if limit and done >= limit:
            return total
        if done >= t.sweeps_per_run:
            workflow.continue_as_new(again(limit - done if limit else 0))
        await workflow.sleep(period_s)


def add(total, done, names: tuple[str, ...]) -> None:
    """Add the counters `names` of one round's result to the run's."""
    for name in names:
        setattr(total, name, getattr(total, name) + getattr(done, name))


@workflow.defn
class SweepWorkflow:
    @workflow.run
    async def run(self, inp: SweepInput) -> SweepResult:
        t = inp.timings
        result = SweepResult(0, 0, 0)

        async def one_round(sweep: int) -> None:
            detected = await workflow.execute_activity_method(
                A.detect, DetectInput(sweep), **long_options(t, 120)
            )
            dispatched = await workflow.execute_activity_method(
                A.dispatch, DispatchInput(detected, t, inp.task_queue), **long_options(t, 300)
            )
            add(result, dispatched, ("started", "already_running"))

        def again(left: int) -> SweepInput:
            return SweepInput(t, inp.task_queue, left)

        return await periodic(t, t.sweep_period_s, inp.sweeps, result, one_round, again, "sweeps")


@workflow.defn
class ShrinkWorkflow:
    @workflow.run
    async def run(self, inp: ShrinkInput) -> ShrinkResult:
        t = Timings()
        try:
            return await workflow.execute_activity_method(A.shrink, inp, **options(t))
        except FAILED as err:
            detail = await report(t, "", workflow.info().workflow_id, err)
            message = f"shrink {inp.namespace}/{inp.name} {inp.group}: {detail}"
            raise ApplicationError(message, type="ShrinkFailed", non_retryable=True) from None


KEEP_COUNTS = ("watched", "kept", "released")
STRAGGLER_COUNTS = ("findings", "started", "already_running", "skipped", "unreachable",
                    "run_errors")  # fmt: skip


@workflow.defn
class KeepWorkflow:
    @workflow.run
    async def run(self, inp: KeepInput) -> KeepResult:
        t = inp.timings
        total = KeepResult()

        async def one_round(_: int) -> None:
            done = await workflow.execute_activity_method(A.keep_nodes, inp, **long_options(t, 120))
            add(total, done, KEEP_COUNTS)

        def again(left: int) -> KeepInput:
            return KeepInput(t, left)

        return await periodic(t, t.keep_period_s, inp.rounds, total, one_round, again)


@workflow.defn
class GrowWorkflow:
    @workflow.run
    async def run(self, inp: GrowInput) -> GrowResult:
        t = inp.timings
        total = GrowResult()

        async def one_round(_: int) -> None:
            done = await workflow.execute_activity_method(A.grow, inp, **long_options(t, 120))
            add(total, done, ("grown", "pods"))

        def again(left: int) -> GrowInput:
            return GrowInput(t, left)

        return await periodic(t, t.grow_period_s, inp.rounds, total, one_round, again)


@workflow.defn
class StragglerWorkflow:
    @workflow.run
    async def run(self, inp: StragglerInput) -> StragglerResult:
        t = inp.timings
        total = StragglerResult()

        async def one_round(_: int) -> None:
            done = await workflow.execute_activity_method(
                A.sweep_stragglers, inp, **long_options(t, 300)
            )
            add(total, done, STRAGGLER_COUNTS)
            total.error = done.error

        def again(left: int) -> StragglerInput:
            return StragglerInput(t, inp.task_queue, left)

        return await periodic(t, t.straggler_period_s, inp.rounds, total, one_round, again)
