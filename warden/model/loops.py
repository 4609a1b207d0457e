"""The messages of the sweep, shrink, grow, kept-nodes and straggler workflows
(`warden.loops`) and of their activities (detection's `Finding`, dispatch, `shrink`,
`grow`, `keep_nodes`, `sweep_stragglers`), and the periodic workflows' IDs. Pure
dataclasses."""

from dataclasses import dataclass, field

from warden.model.timings import Timings


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
class DetectInput:
    sweep: int
    """sequence number of the sweep (for the record)."""


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
    pods: list[str] = field(default_factory=list)
    """The lost replica group's pods: KubeRay deletes these (`workersToDelete`) and no
    other (warden.kuberay). Empty: Warden names pods that are not running members."""


@dataclass
class ShrinkResult:
    replicas_before: int
    replicas_after: int
    changed: bool
    deleted: list[str] = field(default_factory=list)
    """The pods written into `workersToDelete` (KubeRay deletes them)."""


@dataclass
class GrowInput:
    """The grow workflow: a round every `timings.grow_period_s`; `rounds` > 0 stops after
    that many (tests)."""

    timings: Timings
    rounds: int = 0


@dataclass
class GrowResult:
    """Worker groups Warden shrank and raised again (a round, or a whole workflow run)."""

    rounds: int = 0
    grown: int = 0
    """worker groups raised."""
    pods: int = 0
    """replicas added, over all groups."""
    failed: int = 0


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


def grow_workflow_id(cluster: str) -> str:
    return f"warden-grow-{cluster}"


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
