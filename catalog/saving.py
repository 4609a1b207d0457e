"""How long a run needs to stop, shared by the renderer (the pods' grace period) and the
driver (its stop deadline).

A stop (SIGTERM from Kubernetes: a Kueue preemption, an eviction, a spot reclaim; or
Ctrl-C) gives the run `checkpoint.preemption_budget_s` for its final checkpoint, then
`STOP_MARGIN_S` for the rest: the workers leave the loop, Ray Train ends the worker group,
the driver writes the summary. The driver ends itself at budget + margin after the first
signal (driver.channel.stops.StopWatch); the runner renders
`terminationGracePeriodSeconds` = budget + margin, so Kubernetes' SIGKILL never comes
first, with the budget derived from the measured save throughput of the run's device
(`save_throughput.yaml`) and its model size:

    plan = grace_plan(params=7e9, shards=1, device="H200", preemptible=False)
    plan.budget_s, plan.grace_s      # 134, 144: a final save of 84 GB on one pod
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from importlib import resources

import yaml

STOP_MARGIN_S = 10.0
"""Seconds after the final checkpoint's budget for the run to end. Measured: a two-worker
tiny-LM run on the embedded Ray (2-core machine) exited 5.0 to 5.9 s after SIGINT, its
final save taking milliseconds and the notice reaching the workers 0.4 to 2.3 s after the
signal; the margin doubles what is left."""
DEFAULT_BUDGET_S = 25.0
"""`checkpoint.preemption_budget_s` when the run does not say its model size."""
MIN_BUDGET_S = 10.0
"""The least budget a run gets, however small its model (the notice alone takes seconds)."""
STATE_BYTES_PER_PARAM = 12
"""What the driver checkpoints per parameter: fp32 weights (4) and AdamW's two fp32
moments (8) (driver.checkpoint.state; mixed precision keeps fp32 master weights)."""
SAVE_SAFETY = 1.5
"""Measured throughput varies with the load on the node and the bucket: the estimate is
this much longer."""
COMMIT_S = 2.0
"""The commit after the write: DCP's closing all-reduce, the marker, retention."""
SPOT_SHUTDOWN_S = 15.0
"""What GKE gives a pod on a spot VM it reclaims: of its default 30 s graceful node shutdown,
15 s for non-system pods (then 15 s for system pods). A longer period needs the node pool's
system config (GKE 1.35+, up to 120 s)."""
MAX_GRACE_S = 900.0
"""The longest grace period a run may ask for: a preempted run holds its nodes that long
before a higher-priority run gets them."""


@functools.cache
def throughput() -> dict[str, dict]:
    """The measured save throughput per device (`save_throughput.yaml`)."""
    text = resources.files("catalog").joinpath("save_throughput.yaml").read_text()
    return yaml.safe_load(text)


@dataclass(frozen=True)
class GracePlan:
    save_s: float | None
    """Estimated seconds of one pod's final save (None: the model size is not given)."""
    budget_s: int
    """`checkpoint.preemption_budget_s` the driver gets."""
    grace_s: int
    """`terminationGracePeriodSeconds` of the run's pods."""
    state_gb: float | None = None
    """GB one pod writes."""


class GraceError(ValueError):
    """A run whose final save cannot fit the time it would get; one line."""


def save_seconds(params: float, shards: int, device: str) -> tuple[float, float]:
    """(seconds, GB) of one pod's final save: its 1/`shards` of the training state staged
    and written at the device's measured pace, with SAVE_SAFETY and COMMIT_S."""
    row = throughput()[device]
    gigabytes = params * STATE_BYTES_PER_PARAM / max(1, shards) / 1e9
    seconds = gigabytes / row["staging_gb_s"] + gigabytes / row["write_gb_s"]
    return seconds * SAVE_SAFETY + COMMIT_S, gigabytes


def grace_plan(params: float | None, shards: int, device: str, preemptible: bool) -> GracePlan:
    """The budget and grace period of a run; GraceError when its save cannot fit (a spot
    run's save over what GKE gives on a reclaim, any run's over MAX_GRACE_S)."""
    if params is None:
        budget = DEFAULT_BUDGET_S
        save_s = gigabytes = None
    else:
        save_s, gigabytes = save_seconds(params, shards, device)
        budget = max(MIN_BUDGET_S, math.ceil(save_s))
        where = f"a final save of {gigabytes:.3g} GB a pod takes ~{save_s:.0f} s on {device}"
        if preemptible and save_s > SPOT_SHUTDOWN_S:
            raise GraceError(f"{where}, over the {SPOT_SHUTDOWN_S:g} s GKE gives a pod on a "
                             "spot node it reclaims")  # fmt: skip
        if budget + STOP_MARGIN_S > MAX_GRACE_S:
            raise GraceError(f"{where}, over the longest grace period, {MAX_GRACE_S:g} s")
    if preemptible:
        budget = min(budget, SPOT_SHUTDOWN_S)
    budget = int(math.ceil(budget))
    return GracePlan(save_s, budget, int(math.ceil(budget + STOP_MARGIN_S)), gigabytes)


def stop_grace_s(preemption_budget_s: float) -> float:
    """Seconds from the first stop signal until the run must have ended."""
    return float(preemption_budget_s) + STOP_MARGIN_S
