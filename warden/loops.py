"""Warden's periodic and one-off workflows (deterministic, no I/O):

- `SweepWorkflow` (ID `warden-sweep-<cluster>`): periodic detection, starting node workflows
  for findings and for nodes Warden cordoned earlier (the recovery sweep).
- `ShrinkWorkflow`: lower a RayCluster worker group after training dropped a replica group.
- `KeepWorkflow` (ID `warden-keep-<cluster>`): every `keep_period_s`, keep the nodes of
  finished RayJobs that asked for it for their namespace, and release them when the time is
  up (`warden.keep`).
- `StragglerWorkflow` (ID `warden-stragglers-<cluster>`): every `straggler_period_s`, hand
  the nodes of persistent NCCL stragglers in ClickHouse to their node check
  (`warden.stragglers`).

A sweep or kept-nodes round an error stops is recorded (`warden.policy.report`) and the next
one runs as usual; a failed shrink is recorded and fails the workflow, so its caller knows.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from warden.activities import WardenActivities as A
    from warden.model import (
        DetectInput,
        DispatchInput,
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


@workflow.defn
class SweepWorkflow:
    @workflow.run
    async def run(self, inp: SweepInput) -> SweepResult:
        t = inp.timings
        result = SweepResult(0, 0, 0)
        while True:
            try:
                detected = await workflow.execute_activity_method(
                    A.detect, DetectInput(result.sweeps), **long_options(t, 120)
                )
                dispatched = await workflow.execute_activity_method(
                    A.dispatch, DispatchInput(detected, t, inp.task_queue), **long_options(t, 300)
                )
                result.started += dispatched.started
                result.already_running += dispatched.already_running
            except FAILED as err:
                result.failed += 1
                await report(t, "", f"{workflow.info().run_id}-{result.sweeps}", err)
            result.sweeps += 1
            if inp.sweeps and result.sweeps >= inp.sweeps:
                return result
            if result.sweeps >= t.sweeps_per_run:
                left = inp.sweeps - result.sweeps if inp.sweeps else 0
                workflow.continue_as_new(SweepInput(t, inp.task_queue, left))
            await workflow.sleep(t.sweep_period_s)


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


@workflow.defn
class KeepWorkflow:
    @workflow.run
    async def run(self, inp: KeepInput) -> KeepResult:
        t = inp.timings
        total = KeepResult()
        while True:
            try:
                done = await workflow.execute_activity_method(
                    A.keep_nodes, inp, **long_options(t, 120)
                )
                total.watched += done.watched
                total.kept += done.kept
                total.released += done.released
            except FAILED as err:
                total.failed += 1
                await report(t, "", f"{workflow.info().run_id}-{total.rounds}", err)
            total.rounds += 1
            if inp.rounds and total.rounds >= inp.rounds:
                return total
            if total.rounds >= t.sweeps_per_run:
                left = inp.rounds - total.rounds if inp.rounds else 0
                workflow.continue_as_new(KeepInput(t, left))
            await workflow.sleep(t.keep_period_s)


def _add(total: StragglerResult, done: StragglerResult) -> None:
    for name in ("findings", "started", "already_running", "skipped", "unreachable", "run_errors"):
        setattr(total, name, getattr(total, name) + getattr(done, name))
    total.error = done.error


@workflow.defn
class StragglerWorkflow:
    @workflow.run
    async def run(self, inp: StragglerInput) -> StragglerResult:
        t = inp.timings
        total = StragglerResult()
        while True:
            try:
                done = await workflow.execute_activity_method(
                    A.sweep_stragglers, inp, **long_options(t, 300)
                )
                _add(total, done)
            except FAILED as err:
                total.failed += 1
                await report(t, "", f"{workflow.info().run_id}-{total.rounds}", err)
            total.rounds += 1
            if inp.rounds and total.rounds >= inp.rounds:
                return total
            if total.rounds >= t.sweeps_per_run:
                left = inp.rounds - total.rounds if inp.rounds else 0
                workflow.continue_as_new(StragglerInput(t, inp.task_queue, left))
            await workflow.sleep(t.straggler_period_s)
