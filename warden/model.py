"""The messages of Warden's workflows and activities: plain dataclasses, nothing else.

Workflows import this module inside Temporal's sandbox, so it stays pure: no I/O, no clock.
Every activity takes one `...Input` and returns one result dataclass.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DEFINITE = "definite"
AMBIGUOUS = "ambiguous"


@dataclass
class Timings:
    """Periods, timeouts and thresholds the workflows run with (from `WardenConfig`)."""

    __pydantic_config__ = {"extra": "forbid"}  # the config file rejects unknown keys

    activity_timeout_s: float = 60.0
    """start-to-close timeout of one activity attempt; a crashed worker's attempt is retried
    after this long."""
    retry_initial_s: float = 1.0
    """first retry interval of a failed activity (doubles up to 30 times that)."""
    retry_max_attempts: int = 20
    """attempts of an activity (a timeout, a 5xx, a 409) before its workflow gives up,
    records the failure and stops (about 8 minutes with the defaults)."""
    request_timeout_s: float = 20.0
    """timeout of one Kubernetes, GCP, Prometheus or Temporal request (the adapters use
    at most `activity_timeout_s`: a request never outlives its attempt)."""
    failed_recheck_s: float = 600.0
    """how long a node workflow that stopped on an error keeps the node's workflow ID (and
    says why in its phase); the next sweep then tries the node again."""
    poll_s: float = 10.0
    """how often a workflow polls a Job, a terminating pod or a rebooting node."""
    check_timeout_s: float = 1800.0
    """how long the node check or the DCGM diag Job may run before it counts as failed."""
    drain_grace_s: float = 900.0
    """time between notifying the owners of a preemptible job and evicting its pods."""
    reboot_timeout_s: float = 1200.0
    """how long a rebooted node may take to come back Ready with a new boot id."""
    escalate_after: int = 3
    """cordons within `escalate_window_s` (counting this one) that escalate to GCP."""
    escalate_window_s: float = 7 * 86400.0
    """window of the cordon count on the node (`catalog.labels.WARDEN_CORDONS`)."""
    diag_level: int = 3
    """DCGM diagnostic level of the stress test (`dcgmi diag -r LEVEL`, 1 to 4)."""
    busy_recheck_s: float = 300.0
    """how long a node workflow that found user workloads blocking the reboot keeps the
    node's workflow ID before it ends; the next sweep then looks again."""
    max_drain_rounds: int = 3
    """notify/evict rounds before a node whose pods keep returning counts as busy."""
    workflow_task_timeout_s: float = 10.0
    """workflow task timeout, and how long a dead worker's sticky queue holds a task."""
    sweep_period_s: float = 5.0
    """period of the detection and recovery sweep: a fault visible in Prometheus or on the
    node waits up to this long for its cordon (goal: 6 s)."""
    sweeps_per_run: int = 100
    """sweeps before the sweep workflow continues as new (keeps its history short)."""
    keep_period_s: float = 30.0
    """period of the kept-nodes round (`keep_nodes` of a RayJob): a node is kept, or released
    when its time is up, up to this long late."""
    straggler_period_s: float = 300.0
    """period of the straggler sweep (`stragglers` in the config): persistent NCCL stragglers
    in ClickHouse start their node's check up to this long after they qualify."""


@dataclass
class Finding:
    """What detection concluded about one node."""

    node: str
    severity: str
    """`definite` or `ambiguous`."""
    reasons: list[str] = field(default_factory=list)

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons)


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
class SweepInput:
    timings: Timings
    task_queue: str
    sweeps: int = 0
    """stop after this many sweeps (0: run forever, continuing as new)."""


@dataclass
class SweepResult:
    sweeps: int
    started: int
    already_running: int
    failed: int = 0
    """sweeps an error stopped (recorded; the next sweep runs as usual)."""


@dataclass
class ShrinkInput:
    """A training run dropped a replica group: shrink its RayCluster's worker group."""

    namespace: str
    name: str
    group: str
    """workerGroupSpecs[].groupName to shrink."""
    replicas_from: int
    """replicas the run had when it dropped the group; a retry never shrinks twice."""
    replicas_to: int


@dataclass
class ShrinkResult:
    replicas_before: int
    replicas_after: int
    changed: bool


# --- activity messages ---------------------------------------------------------------------


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


@dataclass
class DetectResult:
    findings: list[Finding] = field(default_factory=list)
    recover: list[str] = field(default_factory=list)
    """nodes Warden cordoned earlier that are due for the recovery sweep."""


@dataclass
class DispatchInput:
    detected: DetectResult
    timings: Timings
    task_queue: str


@dataclass
class DispatchResult:
    started: int
    already_running: int


def node_workflow_id(node: str) -> str:
    """The one workflow ID per node: only one worker ever acts on a node."""
    return f"node-{node}"


def stress_workflow_id(node: str) -> str:
    return f"stress-{node}"


@dataclass
class DetectInput:
    sweep: int
    """sequence number of the sweep (for the record)."""


@dataclass
class KeepInput:
    """The kept-nodes workflow: a round every `timings.keep_period_s`; `rounds` > 0 stops
    after that many (tests)."""

    timings: Timings
    rounds: int = 0


@dataclass
class KeepResult:
    """Node changes of one round (or of a whole workflow run)."""

    rounds: int = 0
    watched: int = 0
    kept: int = 0
    released: int = 0
    failed: int = 0
    """rounds an error stopped (recorded; the next round runs as usual)."""


def keep_workflow_id(cluster: str) -> str:
    return f"warden-keep-{cluster}"


@dataclass
class StragglerInput:
    """The straggler sweep: a round every `timings.straggler_period_s`; `rounds` > 0 stops
    after that many (tests)."""

    timings: Timings
    task_queue: str
    rounds: int = 0


@dataclass
class StragglerResult:
    """What one round (or a whole workflow run) of the straggler sweep did."""

    rounds: int = 0
    findings: int = 0
    """persistent straggler ranks found."""
    started: int = 0
    """node workflows started (one per node)."""
    already_running: int = 0
    """nodes whose workflow already ran: left to it."""
    skipped: int = 0
    """nodes gone, cordoned or recently cleared by a node check."""
    unreachable: int = 0
    """rounds the store did not answer (logged; the next round asks again)."""
    run_errors: int = 0
    """runs whose query failed, or that a round had no time left for (the next round
    tries them again)."""
    failed: int = 0
    """rounds another error stopped (recorded; the next round runs as usual)."""
    error: str = ""
    """the last round's store errors, if any."""


def straggler_workflow_id(cluster: str) -> str:
    return f"warden-stragglers-{cluster}"
