"""Checks a cluster definition must pass before the Pulumi program declares anything.

`check(name)` loads `clusters/<name>/cluster.yaml` through the catalog (which already rejects
unknown accelerators, non-spot pools without a reservation and overlapping CIDRs) and adds
the rules only infra needs. Every failure is one `catalog.InputError` naming file and field.

    python -c "import infra.validate as v; v.check('mega-euw4')"

`check_settings` does the same for the stack settings that name parts of the cluster, and
`peers` loads the clusters whose VPCs this one peers with (cross-region DiLoCo) and checks
that their ranges can be peered.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

from catalog import Cluster, InputError, accelerator, load_cluster
from catalog.loader import cluster_file, cluster_names
from infra import cross_region, derive
from infra.settings import Settings

# Google service account ids are 6 to 30 characters; ours are "<cluster>-<role>".
SA_ID_MAX = 30
LONGEST_ROLE = "observability"
# A subnet loses 4 addresses to Google; each GPU node takes one address per NIC subnet.
RESERVED_ADDRESSES = 4


def check(name: str, root: Path | None = None) -> Cluster:
    """The validated cluster, or an InputError naming the first problem."""
    cluster = load_cluster(name, root=root, field="stack")
    source = _source(cluster_file(name, root))
    for rule in (_name_fits, _team_names_fit, _nic_subnets_fit, _rdma_pools_one_zone):
        rule(cluster, source)
    return cluster


def check_settings(cluster: Cluster, settings: Settings) -> None:
    """Stack settings that name parts of the cluster must name real ones."""
    reserved = [p.name for p in cluster.gpu_pools if not p.spot]
    for name in settings.awaiting_delivery:
        if name not in reserved:
            known = ", ".join(reserved) or "none"
            raise InputError(
                settings.source,
                "awaitingDelivery",
                f"{name!r} is not a reserved GPU pool of {cluster.name} (known: {known})",
            )


def peers(cluster: Cluster, root: Path | None = None) -> dict[str, Cluster]:
    """The clusters this cluster's VPC peers with (`infra.cross_region.partners`), by name.

    Each of `cross_region.peers` must be a cluster of the catalog, and no two peered networks
    may overlap: neither this one and a partner, nor two partners (both reach this VPC).
    """
    source = _source(cluster_file(cluster.name, root))
    named = {
        peer: load_cluster(peer, root, source=source, field=f"cross_region.peers[{i}]")
        for i, peer in enumerate(cluster.cross_region.peers if cluster.cross_region else [])
    }
    others = {n: load_cluster(n, root) for n in cluster_names(root) if n not in named}
    others.update(named)
    found = {name: others[name] for name in cross_region.partners(cluster, others)}
    for name, peer in found.items():
        clash = cross_region.overlap(cluster, peer)
        if clash:
            why = "cross_region.peers" if name in named else f"{name}'s cross_region.peers"
            raise InputError(source, clash[0], f"{clash[1]}: the VPCs are peered ({why})")
    rows = list(found.values())
    for i, a in enumerate(rows):
        for b in rows[i + 1 :]:
            clash = cross_region.overlap(a, b)
            if clash:
                message = f"{a.name}'s {clash[0]} {clash[1]}: both peer with {cluster.name}"
                raise InputError(source, "cross_region.peers", message)
    return found


def _source(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _name_fits(cluster: Cluster, source: str) -> None:
    longest = f"{cluster.name}-{LONGEST_ROLE}"
    if len(longest) > SA_ID_MAX:
        room = SA_ID_MAX - len(LONGEST_ROLE) - 1
        raise InputError(source, "name", f"at most {room} characters (service account ids)")


def _team_names_fit(cluster: Cluster, source: str) -> None:
    """Each team gets a Google service account `<cluster>-team-<team>` (at most 30 chars)."""
    for i, team in enumerate(cluster.teams):
        account = derive.team_account_id(cluster, team)
        if len(account) > SA_ID_MAX:
            room = SA_ID_MAX - len(account) + len(team)
            raise InputError(
                source,
                f"teams[{i}]",
                f"{team!r}: at most {room} characters in {cluster.name} "
                f"(its service account id {account!r} is over {SA_ID_MAX})",
            )


def _nic_subnets_fit(cluster: Cluster, source: str) -> None:
    """gpu_cidr must hold one subnet per NIC network, each big enough for the GPU nodes."""
    nets = derive.nic_network_names(cluster)
    prefix = derive.nic_subnet_prefix(cluster)
    base = ipaddress.ip_network(cluster.network.gpu_cidr)
    if prefix > base.max_prefixlen:
        raise InputError(source, "network.gpu_cidr", f"too small for {len(nets)} NIC subnets")
    nodes = sum(p.nodes for p in cluster.gpu_pools)
    usable = 2 ** (base.max_prefixlen - prefix) - RESERVED_ADDRESSES
    if usable < nodes:
        raise InputError(
            source,
            "network.gpu_cidr",
            f"{base} split into {len(nets)} NIC subnets (/{prefix}) leaves {usable} addresses "
            f"per subnet for {nodes} GPU nodes",
        )


def _rdma_pools_one_zone(cluster: Cluster, source: str) -> None:
    """The RoCE network profile is zonal: all pools of an RDMA accelerator share one zone."""
    for key in cluster.accelerators():
        if accelerator(key).network.transport != "rdma":
            continue
        first = derive.rdma_zone(cluster, key)
        for i, pool in enumerate(cluster.gpu_pools):
            if pool.accelerator == key and pool.zone != first:
                raise InputError(
                    source,
                    f"gpu_pools[{i}].zone",
                    f"{key} pools use RDMA and must share one zone ({first}), got {pool.zone}",
                )
