"""The Pulumi program: the stack name selects `clusters/<stack>/cluster.yaml`.

`deploy(name, settings)` validates the cluster definition (one-line `InputError` before any
resource is declared), then declares one component per concern and exports the outputs
later steps need. `infra/__main__.py` calls `main()`; `python -m infra.plan NAME` runs the
same function under Pulumi's mocks.
"""

from __future__ import annotations

from pathlib import Path

import pulumi

from catalog import InputError
from infra import derive, validate
from infra.settings import Settings, stack_file


def deploy(name: str, settings: Settings, root: Path | None = None) -> dict[str, object]:
    """Declare everything cluster `name` needs; returns the exported outputs."""
    spec = validate.check(name, root)
    validate.check_settings(spec, settings)
    partners = validate.peers(spec, root)
    from infra.components.argocd import ArgoCD
    from infra.components.cluster import Cluster
    from infra.components.cross_region import CrossRegion
    from infra.components.identity import Identity
    from infra.components.multinetwork import MultiNetwork
    from infra.components.network import Network
    from infra.components.nodepools import NodePools
    from infra.components.storage import Storage

    network = Network(spec)
    storage = Storage(spec)
    identity = Identity(spec, storage)
    cluster = Cluster(spec, network, settings)
    pools = NodePools(spec, cluster.gke, network, identity.nodes.email, settings)
    if partners:
        CrossRegion(spec, partners, network, identity.nodes.email)
    MultiNetwork(spec, cluster.provider, depends_on=[cluster.gke])
    ArgoCD(spec, cluster.provider, settings, depends_on=[pools.cpu])
    outputs = {
        "cluster_name": cluster.gke.name,
        "cluster_endpoint": cluster.endpoint,
        "checkpoint_bucket": storage.checkpoints.name,
        "bundle_bucket": storage.bundles.name,
        "registry_url": derive.registry_url(spec),
        "service_accounts": identity.emails(),
        "workload_pool": derive.workload_pool(spec),
    }
    for key, value in outputs.items():
        pulumi.export(key, value)
    return outputs


def main() -> None:
    """Entry point under the Pulumi CLI: bad input ends as one line, no traceback."""
    stack = pulumi.get_stack()
    try:
        validate.check(stack)  # before reading config: a wrong stack name is the likelier mistake
        deploy(stack, Settings.from_config(stack_file(stack)))
    except InputError as err:
        raise pulumi.RunError(err.line()) from None
