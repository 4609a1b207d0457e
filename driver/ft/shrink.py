"""After a replica group is lost, the lowest live group asks for the cluster to shrink.

When a missing group counts as lost (not a straggler) is driver.ft.lost's rule. The request
goes to a callable: in a cluster, `gateway_shrink`, which asks Warden's gateway
(warden.client.start_shrink_sync: HTTP with the pod's projected token, `WARDEN_URL` and
`WARDEN_TOKEN_FILE` set by the runner) to start `ShrinkWorkflow` with the RayCluster's
name, its worker-group name, the worker replicas before and after and the lost group's
pods, which KubeRay then deletes and no other (the gateway takes the namespace from the
token); locally, with no Warden, `local_shrink` only logs (Ray releases the dead worker's
placement itself).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("driver.ft")


@dataclass(frozen=True)
class ShrinkRequest:
    """Replica groups were lost (driver.ft.lost decides when): the worker group should hold
    `groups_after` groups, and KubeRay should delete the lost groups' `pods`."""

    groups_before: int
    """Replica groups in the worker group before this loss."""
    groups_after: int
    """Replica groups left."""
    groups: tuple[int, ...] = ()
    """The lost groups."""
    pods: tuple[str, ...] = ()
    """The pods that host only the lost groups' ranks (from each rank's `hello` to the
    run's channel): Warden names them to KubeRay (`workersToDelete`) and deletes no other.
    Empty: no pod is the lost groups' alone (several groups share a pod) or none is known."""

    def replicas(self, workers_per_group: int, per_pod: int = 1) -> tuple[int, int]:
        """Worker-pod replicas before and after (`replicas_from`, `replicas_to` of Warden's
        ShrinkInput) for groups of `workers_per_group` workers, `per_pod` workers a pod;
        with `pods` named, after is before less those pods."""
        pods = lambda groups: -(-groups * workers_per_group // per_pod)  # noqa: E731
        before = pods(self.groups_before)
        if self.pods:
            return before, max(0, before - len(set(self.pods)))
        return before, pods(self.groups_after)


def local_shrink(request: ShrinkRequest) -> None:
    """No Warden here: log the shrink that a cluster would ask for."""
    log.info(
        "ft: shrink from %d to %d replica groups (no Warden: nothing to do)",
        request.groups_before,
        request.groups_after,
    )


@dataclass(frozen=True)
class ShrinkTarget:
    """The RayCluster worker group the run's replica groups live in."""

    namespace: str
    name: str
    """The RayCluster's name."""
    group: str
    """`workerGroupSpecs[].groupName`, as the renderer writes it (runner/render.py)."""
    workers_per_group: int = 1
    """Training workers per replica group."""
    workers_per_pod: int = 1
    """Training workers per worker pod (GPUs per pod on GPU runs)."""


def warden_shrink(target: ShrinkTarget, start: Callable[..., object]) -> Callable:
    """A shrink callable for FtReplica: calls `start(namespace=, name=, group=,
    replicas_from=, replicas_to=, pods=)` (the fields of Warden's ShrinkInput) — in a
    cluster, the ShrinkWorkflow starter of warden.client."""

    def shrink(request: ShrinkRequest) -> None:
        before, after = request.replicas(target.workers_per_group, target.workers_per_pod)
        if after >= before:
            return
        log.warning(
            "ft: asking Warden to shrink %s/%s group %s from %d to %d pods (deleting %s)",
            target.namespace,
            target.name,
            target.group,
            before,
            after,
            ", ".join(request.pods) or "no named pod",
        )
        start(
            namespace=target.namespace,
            name=target.name,
            group=target.group,
            replicas_from=before,
            replicas_to=after,
            pods=list(request.pods),
        )

    return shrink


def gateway_shrink(
    target: ShrinkTarget, url: str | None, token_file: str | None = None
) -> Callable:
    """The cluster's shrink callable: `warden_shrink` through Warden's gateway at `url`
    (None: $WARDEN_URL) with the projected token at `token_file` (None: $WARDEN_TOKEN_FILE)."""
    from warden.client import start_shrink_sync

    def start(**fields):
        return start_shrink_sync(url, **fields, token_file=token_file)

    return warden_shrink(target, start)
