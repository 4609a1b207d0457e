"""Where a shrink request goes, from the worker pod's environment.

    shrink = shrink_from_env(os.environ, workers_per_pod=8, workers_per_group=8)
                                                # None: local, a logged no-op

With `WARDEN_URL` (Warden's gateway) set, the lowest live group asks Warden, through its
gateway (driver.ft.shrink.gateway_shrink: the pod's projected token at `WARDEN_TOKEN_FILE`),
to shrink the RayCluster named in `RAY_CLUSTER` (KubeRay names a RayJob's cluster
`<rayjob>-<suffix>`: the pod's `ray.io/cluster` label through the downward API), namespace
`POD_NAMESPACE`, worker group `RAY_WORKER_GROUP` (the renderer's `worker_group`: the
accelerator's name lowercased, or `cpu`). The runner renders all of them into training
pods (runner/gpupod.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from driver.ft.shrink import ShrinkTarget, gateway_shrink

log = logging.getLogger("driver.ft")

ADDRESS_ENV = "WARDEN_URL"
TOKEN_ENV = "WARDEN_TOKEN_FILE"
TARGET_ENV = {"namespace": "POD_NAMESPACE", "name": "RAY_CLUSTER", "group": "RAY_WORKER_GROUP"}


def target_from_env(env: Mapping[str, str], workers_per_pod: int = 1,
                    workers_per_group: int = 1) -> ShrinkTarget | None:  # fmt: skip
    """The RayCluster worker group to shrink (its replica groups of `workers_per_group`
    workers, `workers_per_pod` a pod), or None when a variable is missing."""
    values = {field: env.get(name) for field, name in TARGET_ENV.items()}
    missing = [TARGET_ENV[f] for f, v in values.items() if not v]
    if missing:
        log.warning("ft: no shrink target: %s not set in the pod", ", ".join(missing))
        return None
    return ShrinkTarget(**values, workers_per_group=workers_per_group,
                        workers_per_pod=workers_per_pod)  # fmt: skip


def shrink_from_env(env: Mapping[str, str], workers_per_pod: int = 1,
                    workers_per_group: int = 1) -> Callable | None:  # fmt: skip
    """A Warden shrink callable for FtReplica, or None (FtReplica's local, logged no-op)."""
    address = env.get(ADDRESS_ENV)
    if not address:
        return None
    target = target_from_env(env, workers_per_pod, workers_per_group)
    if target is None:
        return None
    return gateway_shrink(target, address, env.get(TOKEN_ENV))
