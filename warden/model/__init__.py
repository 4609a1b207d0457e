"""The messages of Warden's workflows and activities: plain dataclasses, nothing else.

Workflows import this package inside Temporal's sandbox, so it stays pure: no I/O, no clock.
Every activity takes one `...Input` and returns one result dataclass. Every name is
importable from `warden.model`; they live in

- `warden.model.timings`: `Timings`, what every workflow runs with;
- `warden.model.node`: the node and stress-test workflows and their activities,
  `DEFINITE` and `AMBIGUOUS`, `node_workflow_id`;
- `warden.model.loops`: the sweep (with detection's `Finding`), shrink, kept-nodes and
  straggler workflows and their activities.

Temporal's converter writes a dataclass as a JSON object without its module, so where a
class lives is no part of any payload or history. The submodules do without `from
__future__ import annotations`: the workflow sandbox holds only `warden.model` in its
`sys.modules`, so a string annotation of a class from a submodule could not be resolved
when a payload is decoded there (tests/warden/test_replay.py decodes them).
"""

from __future__ import annotations

from warden.model.loops import (
    DetectInput,
    DetectResult,
    DispatchInput,
    DispatchResult,
    Finding,
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
    grow_workflow_id,
    keep_workflow_id,
    straggler_workflow_id,
)
from warden.model.node import (
    AMBIGUOUS,
    DEFINITE,
    ActionResult,
    BootState,
    CordonResult,
    DrainInput,
    FailureInput,
    JobInput,
    JobRef,
    JobState,
    NodeAction,
    NodeInput,
    NodeResult,
    RecordInput,
    StressInput,
    StressResult,
    Workload,
    WorkloadReport,
    node_workflow_id,
    stress_workflow_id,
)
from warden.model.timings import (
    Timings,
)

__all__ = [
    "AMBIGUOUS",
    "ActionResult",
    "BootState",
    "CordonResult",
    "DEFINITE",
    "DetectInput",
    "DetectResult",
    "DispatchInput",
    "DispatchResult",
    "DrainInput",
    "FailureInput",
    "Finding",
    "GrowInput",
    "GrowResult",
    "JobInput",
    "JobRef",
    "JobState",
    "KeepInput",
    "KeepResult",
    "NodeAction",
    "NodeInput",
    "NodeResult",
    "RecordInput",
    "ShrinkInput",
    "ShrinkResult",
    "StragglerInput",
    "StragglerResult",
    "StressInput",
    "StressResult",
    "SweepInput",
    "SweepResult",
    "Timings",
    "Workload",
    "WorkloadReport",
    "grow_workflow_id",
    "keep_workflow_id",
    "node_workflow_id",
    "straggler_workflow_id",
    "stress_workflow_id",
]
