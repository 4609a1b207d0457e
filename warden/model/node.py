"""The messages of the node workflows (`NodeWorkflow`, `StressTestWorkflow` in
`warden.workflows`) and of the activities they run (cordon, Jobs, workloads and drain,
reboot, records, failure reports), and their workflow IDs. Pure dataclasses."""

from dataclasses import dataclass, field

from warden.model.timings import Timings

DEFINITE = "definite"
AMBIGUOUS = "ambiguous"


@dataclass
class NodeInput:
    """Start of a node workflow: respond to a finding, or recover an already cordoned node."""

    node: str
    mode: str
    """`respond` (a new finding) or `recover` (a node Warden cordoned earlier)."""
    timings: Timings
    severity: str = DEFINITE
    reason: str = ""


@dataclass
class NodeResult:
    node: str
    outcome: str
    """cleared, busy, uncordoned, escalated, released (a recovery found the node no longer
    cordoned by Warden), failed (an error stopped it: `detail` says which)."""
    actions: list[str] = field(default_factory=list)
    detail: str = ""
    """for `failed`: the step and the error, e.g. `reboot: gcp POST ...: HTTP 403 ...`."""


@dataclass
class StressInput:
    node: str
    remediation_id: str
    timings: Timings


@dataclass
class StressResult:
    node: str
    passed: bool
    detail: str = ""


@dataclass
class NodeAction:
    """One action on one node, tied to the remediation (workflow run) that takes it."""

    node: str
    remediation_id: str
    reason: str = ""


@dataclass
class ActionResult:
    node: str
    changed: bool
    """False when the action had already been taken (a retried attempt)."""
    detail: str = ""


@dataclass
class CordonResult:
    node: str
    changed: bool
    recent_cordons: int
    """cordons within the escalation window, this one included."""


@dataclass
class JobInput:
    node: str
    remediation_id: str
    kind: str
    """`check` (the preflight node check) or `diag` (DCGM diagnostics)."""
    level: int = 0


@dataclass
class JobRef:
    namespace: str
    name: str


@dataclass
class JobState:
    state: str
    """running, succeeded, failed or missing."""


@dataclass
class Workload:
    """The pods of one job on a node, grouped by their owner."""

    namespace: str
    kind: str
    name: str
    pods: list[str] = field(default_factory=list)


@dataclass
class WorkloadReport:
    node: str
    blocking: list[Workload] = field(default_factory=list)
    """user workloads Warden never evicts (non-preemptible, or spanning several nodes)."""
    drainable: list[Workload] = field(default_factory=list)
    """preemptible jobs that run on this node only."""
    terminating: int = 0
    """user pods already being deleted."""
    cordoned: bool = True
    """the node is still cordoned by Warden (a recovery of a node that is not stops)."""


@dataclass
class DrainInput:
    node: str
    remediation_id: str
    workloads: list[Workload]
    grace_s: float = 0.0


@dataclass
class BootState:
    node: str
    rebooted: bool
    """the node reports a boot id other than the one recorded before the reboot."""
    ready: bool


@dataclass
class RecordInput:
    """A decision without a side effect (cleared, busy), recorded as an event and telemetry."""

    node: str
    remediation_id: str
    action: str
    reason: str


@dataclass
class FailureInput:
    """A workflow step an error stopped: recorded, and an Event on the node if it can be."""

    node: str
    """the node, or "" (a sweep, a kept-nodes round, a shrink)."""
    remediation_id: str
    step: str
    """the activity (or child workflow) that failed."""
    error: str


def node_workflow_id(node: str) -> str:
    """The one workflow ID per node: only one worker ever acts on a node."""
    return f"node-{node}"


def stress_workflow_id(node: str) -> str:
    return f"stress-{node}"
