"""`Timings`: the periods, timeouts and thresholds Warden's workflows run with (from
`WardenConfig.timings`; docs/warden.md, "Configuration"). Pure: imported inside Temporal's
sandbox."""

from dataclasses import dataclass


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
    grow_period_s: float = 30.0
    """period of the grow round: a worker group Warden shrank is raised again up to this
    long after capacity for it returns (a repaired, released or new node)."""
    straggler_period_s: float = 300.0
    """period of the straggler sweep (`stragglers` in the config): persistent NCCL stragglers
    in ClickHouse start their node's check up to this long after they qualify."""
