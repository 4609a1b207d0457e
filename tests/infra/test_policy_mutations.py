"""The policy tests can fail: each breaks when one recorded input breaks its rule.

Every case copies a program run, changes one input the way a careless edit of
`infra/components/` would, and runs the policy test on the copy.
"""

from __future__ import annotations

import copy
import inspect

import pytest

from catalog import load_cluster

from . import test_cross_region as cross
from . import test_policy as policy
from . import test_runner_crosscheck as crosscheck
from .conftest import NODE_POOL

GPU_POOL = "ultra-usc1-h200-main"
MEGA_POOL = "mega-euw4-h100-b"


def inputs_of(program, name: str, type_: str = NODE_POOL) -> dict:
    [resource] = [r for r in program.resources if r.type == type_ and r.name == name]
    return resource.inputs


def any_reservation(p):
    inputs_of(p, GPU_POOL)["nodeConfig"]["reservationAffinity"] = {
        "consumeReservationType": "ANY_RESERVATION"
    }


def public_nodes(p):
    inputs_of(p, GPU_POOL)["networkConfig"]["enablePrivateNodes"] = False


def untainted(p):
    inputs_of(p, GPU_POOL)["nodeConfig"]["taints"] = []


def public_bucket(p):
    inputs_of(p, "reve-ultra-usc1-checkpoints", "gcp:storage/bucket:Bucket")[
        "publicAccessPrevention"
    ] = "inherited"


def all_users_reader(p):
    grant = p.of_type("gcp:storage/bucketIAMMember:BucketIAMMember")[0]
    grant.inputs["member"] = "allUsers"


def team_grant(p, name: str = "ultra-usc1-team-media-checkpoints") -> dict:
    return inputs_of(p, name, "gcp:storage/bucketIAMMember:BucketIAMMember")


def whole_bucket(p):
    del team_grant(p)["condition"]


def other_teams_prefix(p):
    grant = team_grant(p)
    grant["condition"] = dict(grant["condition"])
    grant["condition"]["expression"] = grant["condition"]["expression"].replace(
        "/objects/media/", "/objects/research/"
    )


def shared_account(p):
    research = team_grant(p, "ultra-usc1-team-research-checkpoints")
    team_grant(p)["member"] = research["member"]


def one_account_for_all_teams(p):
    bindings = p.of_type("gcp:serviceaccount/iAMMember:IAMMember")
    media = [b for b in bindings if b.name == "ultra-usc1-wi-team-media"][0]
    research = [b for b in bindings if b.name == "ultra-usc1-wi-team-research"][0]
    media.inputs["serviceAccountId"] = research.inputs["serviceAccountId"]


def warden_any_vm(p):
    member = inputs_of(p, "ultra-usc1-warden-node-repair", "gcp:projects/iAMMember:IAMMember")
    del member["condition"]


def editor_role(p):
    p.of_type("gcp:projects/iAMMember:IAMMember")[0].inputs["role"] = "roles/editor"


def floating_chart(p):
    p.of_type("kubernetes:helm.sh/v3:Release")[0].inputs["version"] = "10.x"


def two_zone_compact(p):
    inputs_of(p, GPU_POOL)["nodeLocations"] = ["us-central1-b", "us-central1-c"]


def no_gvnic(p):
    del inputs_of(p, GPU_POOL)["nodeConfig"]["gvnic"]


def no_periodic_maintenance(p):
    del inputs_of(p, MEGA_POOL)["nodeConfig"]["hostMaintenancePolicy"]


def nodes_before_delivery(p):
    inputs_of(p, GPU_POOL)["nodeCount"] = 128


SYNC_RULE = "ultra-usc1-cross-region-sync"
FIREWALL = "gcp:compute/firewall:Firewall"


def sync_port_and_ssh(p):
    inputs_of(p, SYNC_RULE, FIREWALL)["allows"][0]["ports"].append("22")


def sync_from_anywhere(p):
    inputs_of(p, SYNC_RULE, FIREWALL)["sourceRanges"] = ["0.0.0.0/0"]


def sync_on_every_vm(p):
    del inputs_of(p, SYNC_RULE, FIREWALL)["targetServiceAccounts"]


def internal_rule_admits_peer(p):
    inputs_of(p, "ultra-usc1-internal", FIREWALL)["sourceRanges"].append("10.16.0.0/14")


def peering_imports_custom_routes(p):
    peering = "gcp:compute/networkPeering:NetworkPeering"
    inputs_of(p, "mega-euw4-to-ultra-usc1", peering)["importCustomRoutes"] = True


CASES = [
    ("ultra-usc1", nodes_before_delivery, policy.test_undelivered_reservations_hold_no_nodes),
    (
        "ultra-usc1",
        any_reservation,
        policy.test_every_reserved_gpu_pool_is_bound_to_its_reservation,
    ),
    ("ultra-usc1", public_nodes, policy.test_no_node_has_a_public_ip),
    ("ultra-usc1", untainted, policy.test_gpu_pools_are_tainted),
    ("ultra-usc1", public_bucket, policy.test_buckets_are_not_public),
    ("ultra-usc1", all_users_reader, policy.test_buckets_are_not_public),
    ("ultra-usc1", editor_role, policy.test_service_accounts_have_no_basic_roles),
    ("ultra-usc1", whole_bucket, policy.test_bucket_grants_are_limited_to_the_team_prefix),
    ("ultra-usc1", other_teams_prefix, policy.test_bucket_grants_are_limited_to_the_team_prefix),
    ("ultra-usc1", shared_account, policy.test_bucket_grants_are_limited_to_the_team_prefix),
    (
        "ultra-usc1",
        one_account_for_all_teams,
        policy.test_each_team_has_its_own_account_bound_to_its_own_namespace,
    ),
    ("ultra-usc1", warden_any_vm, policy.test_warden_repairs_only_the_cluster_s_own_vms),
    ("ultra-usc1", floating_chart, policy.test_versions_pinned),
    ("ultra-usc1", two_zone_compact, policy.test_compact_pools_have_one_zone),
    ("ultra-usc1", no_gvnic, policy.test_gpu_pools_match_the_accelerator_catalog),
    ("mega-euw4", no_periodic_maintenance, policy.test_gpu_pools_match_the_accelerator_catalog),
    (
        "ultra-usc1",
        sync_port_and_ssh,
        cross.test_the_synchronizer_port_is_open_to_the_peers_pods_only,
    ),
    (
        "ultra-usc1",
        sync_from_anywhere,
        cross.test_the_synchronizer_port_is_open_to_the_peers_pods_only,
    ),
    (
        "ultra-usc1",
        sync_on_every_vm,
        cross.test_the_synchronizer_port_is_open_to_the_peers_pods_only,
    ),
    (
        "ultra-usc1",
        internal_rule_admits_peer,
        cross.test_the_synchronizer_port_is_open_to_the_peers_pods_only,
    ),
    (
        "mega-euw4",
        peering_imports_custom_routes,
        cross.test_peerings_exchange_only_private_subnet_routes,
    ),
]


@pytest.mark.parametrize(("cluster", "mutate", "rule"), CASES, ids=[c[1].__name__ for c in CASES])
def test_policy_catches(programs, cluster, mutate, rule):
    program = copy.deepcopy(programs[cluster])
    fixtures = {"program": program, "spec": load_cluster(cluster), "cluster_name": cluster}
    wanted = {name: fixtures[name] for name in inspect.signature(rule).parameters}
    rule(**wanted)  # holds on the real program
    mutate(program)
    with pytest.raises(AssertionError):
        rule(**wanted)


@pytest.mark.parametrize(
    "change",
    [
        lambda config: config["labels"].update({"platform.reve.dev/pool": "gpu-x"}),
        lambda config: config["taints"].append(
            {"key": "example.com/extra", "value": "1", "effect": "NO_SCHEDULE"}
        ),
    ],
    ids=["label", "taint"],
)
def test_crosscheck_catches_labels_or_taints_the_runner_does_not_render(programs, change):
    mutated = copy.deepcopy(programs)
    for resource in mutated["ultra-usc1"].of_type(NODE_POOL):
        if "guestAccelerators" in resource.inputs["nodeConfig"]:
            change(resource.inputs["nodeConfig"])
    [tiny_lm] = [p for p in crosscheck.EXAMPLES if p.stem == "tiny-lm"]
    crosscheck.test_rendered_pods_land_on_declared_pools(programs, tiny_lm)
    with pytest.raises(AssertionError, match="no node pool matches"):
        crosscheck.test_rendered_pods_land_on_declared_pools(mutated, tiny_lm)
