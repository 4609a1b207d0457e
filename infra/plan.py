"""Offline plan: what the infra program declares for a cluster, without Pulumi CLI or cloud.

Runs `infra.program.deploy` under Pulumi's mocks and prints the resource graph (components
and their children, each with its type, name and key inputs, one input a line) and the
stack outputs. Output is sorted, so a pull request that changes `clusters/` can paste the
diff of two plans.

    python -m infra.plan mega-euw4                # text tree
    python -m infra.plan ultra-usc1 --json        # every input of every resource
    python -m infra.plan ultra-usc1 --set awaitingDelivery='["h200-main"]'
    python -m infra.plan --write                  # rewrite infra/plans/*.txt (committed)

Exit codes: 0 ok, 2 bad input (one line on stderr, nothing declared).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from catalog import InputError, exitcodes

PLANS = Path(__file__).resolve().parent / "plans"
"""Committed plans, one per cluster: a change to clusters/ or infra/ shows up in their diff."""

# Inputs worth a glance per resource type (dotted paths into the camelCase inputs).
KEY_INPUTS: dict[str, list[str]] = {
    "gcp:compute/network:Network": ["mtu", "networkProfile"],
    "gcp:compute/subnetwork:Subnetwork": ["ipCidrRange", "secondaryIpRanges"],
    "gcp:compute/firewall:Firewall": ["sourceRanges", "allows", "targetServiceAccounts"],
    "gcp:compute/networkPeering:NetworkPeering": [
        "peerNetwork",
        "exportCustomRoutes",
        "importCustomRoutes",
    ],
    "gcp:compute/routerNat:RouterNat": ["sourceSubnetworkIpRangesToNat"],
    "gcp:container/cluster:Cluster": [
        "location",
        "minMasterVersion",
        "releaseChannel.channel",
        "datapathProvider",
        "enableMultiNetworking",
        "privateClusterConfig.enablePrivateNodes",
        "monitoringConfig.managedPrometheus.enabled",
    ],
    "gcp:container/nodePool:NodePool": [
        "nodeConfig.machineType",
        "nodeCount",
        "autoscaling",
        "nodeLocations",
        "nodeConfig.guestAccelerators",
        "nodeConfig.reservationAffinity",
        "nodeConfig.spot",
        "nodeConfig.hostMaintenancePolicy.maintenanceInterval",
        "placementPolicy.type",
        "nodeConfig.labels",
        "nodeConfig.taints",
        "networkConfig.additionalNodeNetworkConfigs",
    ],
    "gcp:compute/futureReservation:FutureReservation": [
        "zone",
        "reservationName",
        "timeWindow",
        "specificSkuProperties.totalCount",
        "specificSkuProperties.instanceProperties.machineType",
        "specificSkuProperties.instanceProperties.maintenanceInterval",
    ],
    "gcp:storage/bucket:Bucket": ["location", "publicAccessPrevention", "lifecycleRules"],
    "gcp:artifactregistry/repository:Repository": ["location", "format"],
    "gcp:serviceaccount/account:Account": ["accountId"],
    "gcp:projects/iAMMember:IAMMember": ["role", "member", "condition.expression"],
    "gcp:projects/iAMCustomRole:IAMCustomRole": ["roleId", "permissions"],
    "gcp:serviceaccount/iAMMember:IAMMember": ["role", "member"],
    "gcp:storage/bucketIAMMember:BucketIAMMember": [
        "bucket",
        "role",
        "member",
        "condition.expression",
    ],
    "gcp:artifactregistry/repositoryIamMember:RepositoryIamMember": ["role", "member"],
    "kubernetes:networking.gke.io/v1:GKENetworkParamSet": ["spec"],
    "kubernetes:networking.gke.io/v1:Network": ["spec.type"],
    "kubernetes:helm.sh/v3:Release": ["chart", "version", "namespace"],
    "kubernetes:argoproj.io/v1alpha1:Application": ["spec.source"],
}


def pick(inputs: dict, path: str) -> object:
    """The value at a dotted path, or None."""
    value: object = inputs
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def compact(value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str):
        return value
    return json.dumps(_ints(value), separators=(",", ":"), sort_keys=True)


def _ints(value: object) -> object:
    """Pulumi's wire format makes every number a float; show whole numbers as ints."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ints(v) for v in value]
    return value


def describe(resource, indent: str) -> list[str]:
    """`type  name`, then one `path: value` line per key input (a list of objects: a line each).

    One fact per line, so the diff of two plans shows exactly the inputs that changed.
    """
    lines = [f"{indent}{resource.type}  {resource.name}"]
    for path in KEY_INPUTS.get(resource.type, []):
        value = pick(resource.inputs, path)
        if value in (None, [], {}):
            continue
        if isinstance(value, list) and len(value) > 1 and any(isinstance(v, dict) for v in value):
            lines.append(f"{indent}    {path}:")
            lines += [f"{indent}      - {compact(v)}" for v in value]
        else:
            lines.append(f"{indent}    {path}: {compact(value)}")
    return lines


def text_plan(run, cluster: str) -> str:
    """The resource tree, children sorted by type and name, then the outputs."""
    lines = [f"# offline plan of stack {cluster}: {len(run.resources)} resources (Pulumi mocks)"]

    def walk(parent: str | None, depth: int) -> None:
        kids = sorted(
            (r for r in run.resources if r.parent == parent), key=lambda r: (r.type, r.name)
        )
        for kid in kids:
            lines.extend(describe(kid, "  " * depth))
            walk(kid.urn, depth + 1)

    walk(None, 0)
    lines.append("# outputs")
    for key in sorted(run.outputs):
        lines.append(f"{key} = {compact(run.outputs[key])}")
    return "\n".join(lines)


def json_plan(run) -> str:
    by_urn = run.by_urn()
    rows = [
        {
            "type": r.type,
            "name": r.name,
            "parent": by_urn[r.parent].name if r.parent in by_urn else None,
            "parent_type": by_urn[r.parent].type if r.parent in by_urn else None,
            "inputs": _ints(r.inputs),
        }
        for r in sorted(run.resources, key=lambda r: (r.type, r.name))
    ]
    return json.dumps({"resources": rows, "outputs": run.outputs}, indent=2, sort_keys=True)


def parse_sets(pairs: list[str]) -> dict[str, str]:
    """`key=value` pairs, values kept as text (lists as JSON: awaitingDelivery='["pool"]')."""
    config: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InputError("--set", None, f"expected key=value, got {pair!r}")
        config[key] = value
    return config


def write_plans() -> list[Path]:
    """Write `infra/plans/<cluster>.txt` for every cluster (the committed plans)."""
    from catalog import cluster_names
    from infra.mocks import run

    PLANS.mkdir(exist_ok=True)
    written = []
    for name in cluster_names():
        path = PLANS / f"{name}.txt"
        path.write_text(text_plan(run(name), name) + "\n")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m infra.plan", description=__doc__.split("\n")[0]
    )
    parser.add_argument("cluster", nargs="?", help="stack name = folder under clusters/")
    parser.add_argument("--json", action="store_true", help="every input, as JSON")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="stack config, e.g. revision=v1.2 (repeatable)",
    )
    parser.add_argument(
        "--write", action="store_true", help="rewrite infra/plans/<cluster>.txt for every cluster"
    )
    args = parser.parse_args(argv)
    if args.write != (args.cluster is None) or (args.write and (args.json or args.set)):
        parser.error("give a CLUSTER, or --write alone")
    from infra.mocks import run

    try:
        if args.write:
            for path in write_plans():
                print(f"wrote {path.relative_to(PLANS.parent.parent)}")
            return exitcodes.OK
        result = run(args.cluster, parse_sets(args.set))
    except InputError as err:
        print(err.line(), file=sys.stderr)
        return exitcodes.USAGE
    print(json_plan(result) if args.json else text_plan(result, args.cluster))
    return exitcodes.OK


if __name__ == "__main__":
    sys.exit(main())
