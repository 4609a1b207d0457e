"""After a replica group is dropped, the lowest live group asks for the cluster to shrink.

The request goes to a callable: in a cluster, one that starts Warden's `ShrinkWorkflow`
(warden.client, with the RayCluster's namespace, name and worker-group name, and the
worker replicas before and after); locally, with no Warden, `local_shrink` only logs (Ray
releases the dead worker's placement itself).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

log = logging.getLogger("driver.ft")


@dataclass(frozen=True)
class ShrinkRequest:
    """A quorum lost replica groups: the worker group should hold `groups_after` groups."""

    groups_before: int
    """Replica groups in the last quorum that had all of them."""
    groups_after: int
    """Replica groups in the new quorum."""

    def replicas(self, workers_per_group: int, per_pod: int = 1) -> tuple[int, int]:
        """Worker-pod replicas before and after (`replicas_from`, `replicas_to` of Warden's
        ShrinkInput) for groups of `workers_per_group` workers, `per_pod` workers a pod."""
        pods = lambda groups: -(-groups * workers_per_group // per_pod)  # noqa: E731
        return pods(self.groups_before), pods(self.groups_after)


def local_shrink(request: ShrinkRequest) -> None:
    """No Warden here: log the shrink that a cluster would ask for."""
    log.info(
        "ft: shrink from %d to %d replica groups (no Warden: nothing to do)",
        request.groups_before,
        request.groups_after,
    )
