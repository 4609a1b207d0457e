"""Warden's workflows: deterministic, side-effect free, run in Temporal's sandbox.

- `NodeWorkflow` (ID `node-<name>`, one per node): respond to a finding (definite: cordon;
  ambiguous: node check Job, then cordon or clear), escalate on repeated cordons, else
  recover: wait for the node to be free of user workloads (draining preemptible single-node
  jobs after notifying their owners and a grace period), reboot, stress-test, uncordon.
- `StressTestWorkflow` (ID `stress-<name>`, a child): DCGM diag Job at the configured level.
- `SweepWorkflow`, `ShrinkWorkflow`, `GrowWorkflow`, `KeepWorkflow`, `StragglerWorkflow`: in
  `warden.loops`,
  importable from here.

All side effects are activities (`warden.activities`); the remediation id is the run id.
Every activity runs with a start-to-close timeout and a bounded retry policy
(`warden.policy.options`); the long ones heartbeat. An error that retrying cannot fix (a
403, a 400, a node gone), or retries that ran out, stop the workflow with a report
(`report_failure`): a node workflow ends `failed` naming the step and the error.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from warden.activities import WardenActivities as A
    from warden.loops import (
        GrowWorkflow,
        KeepWorkflow,
        ShrinkWorkflow,
        StragglerWorkflow,
        SweepWorkflow,
    )
    from warden.model import (
        AMBIGUOUS,
        DrainInput,
        JobInput,
        NodeAction,
        NodeInput,
        NodeResult,
        RecordInput,
        StressInput,
        StressResult,
        Timings,
        Workload,
        stress_workflow_id,
    )
    from warden.policy import FAILED, long_options, options, report

__all__ = [
    "GrowWorkflow", "KeepWorkflow", "NodeWorkflow", "ShrinkWorkflow", "StragglerWorkflow",
    "StressTestWorkflow", "SweepWorkflow",
]  # fmt: skip


async def run_job(t: Timings, node: str, rid: str, kind: str, level: int = 0) -> str:
    """Start the node check or diag Job and poll it: succeeded, failed or timed out."""
    ref = await workflow.execute_activity_method(
        A.start_job, JobInput(node, rid, kind, level), **options(t)
    )
    deadline = workflow.now() + timedelta(seconds=t.check_timeout_s)
    while True:
        state = (await workflow.execute_activity_method(A.job_status, ref, **options(t))).state
        if state in ("succeeded", "failed"):
            return state
        if state == "missing":
            return "failed (Job deleted)"
        if workflow.now() >= deadline:
            return "timed out"
        await workflow.sleep(t.poll_s)


RELEASED = "released"


def _key(w: Workload) -> tuple[str, str, str]:
    return w.namespace, w.kind, w.name


def _names(found: list[Workload]) -> str:
    return ", ".join(f"{w.namespace}/{w.name}" for w in found)


@workflow.defn
class NodeWorkflow:
    def __init__(self) -> None:
        self.phase = "starting"
        self.actions: list[str] = []

    @workflow.query
    def current_phase(self) -> str:
        return self.phase

    async def _do(self, phase: str, method, arg, long: bool = False):
        self.phase = phase
        opts = long_options(self.t, 0) if long else options(self.t)
        result = await workflow.execute_activity_method(method, arg, **opts)
        self.actions.append(phase)
        return result

    def _done(self, node: str, outcome: str) -> NodeResult:
        self.phase = outcome
        return NodeResult(node, outcome, list(self.actions))

    @workflow.run
    async def run(self, inp: NodeInput) -> NodeResult:
        self.t, self.mode = inp.timings, inp.mode
        try:
            return await self._remediate(inp, workflow.info().run_id)
        except FAILED as err:
            return await self._failed(inp.node, workflow.info().run_id, err)

    async def _failed(self, node: str, rid: str, err: BaseException) -> NodeResult:
        """Stop on an error: report it, hold the node's workflow ID for `failed_recheck_s`
        (the phase says why), then end `failed`; the next sweep tries the node again."""
        detail = await report(self.t, node, rid, err)
        self.phase = f"failed: {detail}"
        await workflow.sleep(self.t.failed_recheck_s)
        return NodeResult(node, "failed", list(self.actions), detail)

    async def _remediate(self, inp: NodeInput, rid: str) -> NodeResult:
        node, reason = inp.node, inp.reason
        if inp.mode == "respond":
            if inp.severity == AMBIGUOUS:
                self.phase = "check"
                verdict = await run_job(self.t, node, rid, "check")
                self.actions.append(f"check {verdict}")
                if verdict == "succeeded":
                    await self._do(
                        "clear",
                        A.record,
                        RecordInput(node, rid, "clear", f"node check passed: {reason}"),
                    )
                    return self._done(node, "cleared")
                reason = f"{reason}; node check {verdict}"
            cordon = await self._do("cordon", A.cordon, NodeAction(node, rid, reason))
            if cordon.recent_cordons >= self.t.escalate_after:
                why = f"{cordon.recent_cordons} cordons within the window; {reason}"
                return await self._escalate(node, rid, why)
        return await self._recover(node, rid)

    async def _escalate(self, node: str, rid: str, reason: str) -> NodeResult:
        await self._do("escalate", A.escalate, NodeAction(node, rid, reason))
        return self._done(node, "escalated")

    async def _busy(self, node: str, rid: str, reason: str) -> NodeResult:
        """Leave the node cordoned for a later recovery sweep: hold the node's workflow ID
        for `busy_recheck_s`, so sweeps do not look again before. Only a fresh cordon
        records it: a sweep that finds the node still busy says so in its history alone."""
        if self.mode == "respond":
            await self._do("busy", A.record, RecordInput(node, rid, "busy", reason))
        self.phase = f"busy: {reason}"
        await workflow.sleep(self.t.busy_recheck_s)
        return self._done(node, "busy")

    async def _wait_idle(self, node: str, rid: str) -> str | None:
        """Drain what may be drained; the blocking workloads' names, RELEASED when the node
        is no longer cordoned by Warden, or None once idle."""
        drains = 0
        deadline = workflow.now() + timedelta(seconds=self.t.reboot_timeout_s)
        while True:
            report = await self._do("inspect", A.inspect, NodeAction(node, rid), long=True)
            if not report.cordoned:
                return RELEASED
            if report.blocking:
                return f"user workloads run on the node: {_names(report.blocking)}"
            if report.terminating and workflow.now() < deadline:
                await workflow.sleep(self.t.poll_s)
                continue
            if not report.drainable and not report.terminating:
                return None
            if drains >= self.t.max_drain_rounds or report.terminating:
                return f"pods keep running on the node: {_names(report.drainable) or 'terminating'}"
            grace = self.t.drain_grace_s
            await self._do("notify", A.notify, DrainInput(node, rid, report.drainable, grace))
            await workflow.sleep(grace)
            again = await self._do("inspect", A.inspect, NodeAction(node, rid), long=True)
            if again.blocking:
                return f"user workloads run on the node: {_names(again.blocking)}"
            notified = {_key(w) for w in report.drainable}
            still = [w for w in again.drainable if _key(w) in notified]
            await self._do("drain", A.drain, DrainInput(node, rid, still, grace), long=True)
            drains += 1

    async def _recover(self, node: str, rid: str) -> NodeResult:
        """Wait for idle, reboot, stress-test, uncordon. A node no longer cordoned by Warden
        (uncordoned by the run that repaired it, seen by a sweep a moment before; or by a
        person) is left alone: `released`, nothing done."""
        busy = await self._wait_idle(node, rid)
        if busy == RELEASED:
            return self._done(node, "released")
        if busy:
            return await self._busy(node, rid, busy)
        reboot = await self._do("reboot", A.reboot, NodeAction(node, rid, "repair reboot"))
        if reboot.detail == "released":
            return self._done(node, "released")
        if reboot.detail == "busy":
            return await self._busy(node, rid, "a workload arrived before the reboot")
        deadline = workflow.now() + timedelta(seconds=self.t.reboot_timeout_s)
        while True:
            boot = await self._do("wait-boot", A.boot_state, NodeAction(node, rid))
            if boot.rebooted and boot.ready:
                break
            if workflow.now() >= deadline:
                return await self._escalate(node, rid, "node did not come back after a reboot")
            await workflow.sleep(self.t.poll_s)
        self.phase = "stress-test"
        stress = await workflow.execute_child_workflow(
            StressTestWorkflow.run, StressInput(node, rid, self.t), id=stress_workflow_id(node)
        )
        self.actions.append(f"diag {stress.detail}")
        if stress.passed:
            await self._do(
                "uncordon", A.uncordon, NodeAction(node, rid, "DCGM diag passed after reboot")
            )
            return self._done(node, "uncordoned")
        why = f"DCGM diag level {self.t.diag_level} {stress.detail} after reboot"
        return await self._escalate(node, rid, why)


@workflow.defn
class StressTestWorkflow:
    @workflow.run
    async def run(self, inp: StressInput) -> StressResult:
        t = inp.timings
        verdict = await run_job(t, inp.node, inp.remediation_id, "diag", t.diag_level)
        action = "diag-passed" if verdict == "succeeded" else "diag-failed"
        reason = f"DCGM diag level {t.diag_level}: {verdict}"
        record = RecordInput(inp.node, inp.remediation_id, action, reason)
        await workflow.execute_activity_method(A.record, record, **options(t))
        return StressResult(inp.node, verdict == "succeeded", verdict)
