"""Rules the infrastructure must always keep, checked on the program run under mocks."""

from __future__ import annotations

import re

from catalog import labels as names
from infra.components import TYPE_PREFIX
from infra.components.argocd import CHART_VERSION
from infra.components.nodepools import RESERVATION_KEY

from .conftest import pools

RESERVATION_URI = re.compile(
    r"^projects/[a-z][-a-z0-9]*/reservations/[a-z][-a-z0-9]*(/reservationBlocks/[a-z][-a-z0-9]*)?$"
)
IAM_TYPES = {
    "gcp:projects/iAMMember:IAMMember",
    "gcp:serviceaccount/iAMMember:IAMMember",
    "gcp:storage/bucketIAMMember:BucketIAMMember",
    "gcp:artifactregistry/repositoryIamMember:RepositoryIamMember",
}
BASIC_ROLES = {"roles/owner", "roles/editor", "roles/viewer"}
PUBLIC_MEMBERS = {"allUsers", "allAuthenticatedUsers"}


def gpu_pool_inputs(program, spec):
    by_name = pools(program)
    return [(p, by_name[p.name]) for p in spec.gpu_pools]


def test_every_reserved_gpu_pool_is_bound_to_its_reservation(program, spec):
    for pool, inputs in gpu_pool_inputs(program, spec):
        affinity = inputs["nodeConfig"]["reservationAffinity"]
        if pool.spot:
            assert inputs["nodeConfig"]["spot"] is True
            assert affinity == {"consumeReservationType": "NO_RESERVATION"}
            continue
        assert affinity["consumeReservationType"] == "SPECIFIC_RESERVATION"
        assert affinity["key"] == RESERVATION_KEY
        [value] = affinity["values"]
        assert RESERVATION_URI.match(value), value
        assert f"/reservations/{pool.reservation.name}" in value
        assert "spot" not in inputs["nodeConfig"]


def test_no_node_has_a_public_ip(program):
    [cluster] = program.of_type("gcp:container/cluster:Cluster")
    assert cluster.inputs["privateClusterConfig"]["enablePrivateNodes"] is True
    assert cluster.inputs["removeDefaultNodePool"] is True
    for name, inputs in pools(program).items():
        assert inputs["networkConfig"]["enablePrivateNodes"] is True, name


def test_gpu_pools_are_tainted(program, spec):
    for pool, inputs in gpu_pool_inputs(program, spec):
        taints = inputs["nodeConfig"]["taints"]
        assert {"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"} in taints
        spot_taint = {"key": names.SPOT_TAINT["key"], "value": "true", "effect": "NO_SCHEDULE"}
        assert (spot_taint in taints) == pool.spot


def test_cpu_pool_untainted_and_labelled(program, spec):
    inputs = pools(program)[spec.cpu_pool.name]
    assert "taints" not in inputs["nodeConfig"]
    assert inputs["nodeConfig"]["labels"] == names.cpu_node_labels()


def test_gpu_pools_match_the_accelerator_catalog(program, spec):
    from catalog import accelerator

    for pool, inputs in gpu_pool_inputs(program, spec):
        acc = accelerator(pool.accelerator)
        config = inputs["nodeConfig"]
        assert config["machineType"] == acc.machine_type
        [gpu] = config["guestAccelerators"]
        assert (gpu["type"], gpu["count"]) == (acc.gke_accelerator, acc.gpus_per_node)
        assert gpu["gpuDriverInstallationConfig"]["gpuDriverVersion"] == "LATEST"
        assert config["ephemeralStorageLocalSsdConfig"]["localSsdCount"] == acc.local_ssd_count
        assert config.get("gvnic") == {"enabled": True}
        assert inputs["nodeLocations"] == [pool.zone]
        assert inputs["management"] == {"autoRepair": True, "autoUpgrade": True}
        placement = inputs.get("placementPolicy")
        assert placement == ({"type": "COMPACT"} if pool.placement == "compact" else None)
        # A3 Mega takes PERIODIC host maintenance (as XPK and Cluster Toolkit create it).
        periodic = acc.machine_type == "a3-megagpu-8g" and not pool.spot
        wanted = {"maintenanceInterval": "PERIODIC"} if periodic else None
        assert config.get("hostMaintenancePolicy") == wanted


def test_compact_pools_have_one_zone(program, spec):
    """COMPACT placement needs exactly one zone: per pool, even in a two-zone cluster."""
    compact = [i for i in pools(program).values() if i.get("placementPolicy")]
    assert len(compact) == sum(p.placement == "compact" for p in spec.gpu_pools)
    for inputs in compact:
        assert inputs["placementPolicy"] == {"type": "COMPACT"}
        assert len(inputs["nodeLocations"]) == 1, inputs["name"]


def test_buckets_are_not_public(program, spec):
    buckets = {r.inputs["name"]: r.inputs for r in program.of_type("gcp:storage/bucket:Bucket")}
    assert set(buckets) == {spec.buckets.checkpoints, spec.buckets.bundles}
    for inputs in buckets.values():
        assert inputs["publicAccessPrevention"] == "enforced"
        assert inputs["uniformBucketLevelAccess"] is True
        assert inputs["lifecycleRules"]
    for r in program.resources:
        if r.type in IAM_TYPES:
            assert r.inputs["member"] not in PUBLIC_MEMBERS, r.name


def test_service_accounts_have_no_basic_roles(program):
    members = [r for r in program.resources if r.type in IAM_TYPES]
    assert members
    for r in members:
        assert r.inputs["role"] not in BASIC_ROLES, r.name
    for role in program.of_type("gcp:projects/iAMCustomRole:IAMCustomRole"):
        for permission in role.inputs["permissions"]:
            assert not permission.endswith(".setIamPolicy"), permission
            assert not permission.startswith("resourcemanager."), permission


BUCKET_GRANT = "gcp:storage/bucketIAMMember:BucketIAMMember"
WI_BINDING = "gcp:serviceaccount/iAMMember:IAMMember"


def team_of_account(email: str, spec) -> str | None:
    """The team whose runs act as this Google account (`<cluster>-team-<team>@`), if any."""
    local = email.split("@", 1)[0]
    prefix = f"{spec.name}-team-"
    return local.removeprefix(prefix) if local.startswith(prefix) else None


def test_each_team_has_its_own_account_bound_to_its_own_namespace(program, spec):
    """Workload Identity per namespace: team T's KSA `training` acts as T's account only."""
    pool = f"{spec.project}.svc.id.goog"
    by_team = {}
    for r in program.of_type(WI_BINDING):
        team = team_of_account(r.inputs["serviceAccountId"].rsplit("/", 1)[-1], spec)
        if team is not None:
            assert team not in by_team, f"{team}: two Workload Identity bindings"
            by_team[team] = r.inputs["member"]
    assert by_team == {t: f"serviceAccount:{pool}[{t}/training]" for t in spec.teams}


def test_bucket_grants_are_limited_to_the_team_prefix(program, spec):
    """No account holds a whole bucket: every grant is a team's, conditioned on `<team>/`."""
    grants = program.of_type(BUCKET_GRANT)
    buckets = {spec.buckets.checkpoints, spec.buckets.bundles}
    seen = set()
    for g in grants:
        inputs = g.inputs
        team = team_of_account(inputs["member"].removeprefix("serviceAccount:"), spec)
        assert team in spec.teams, f"{g.name}: {inputs['member']} is not a team's account"
        assert inputs["role"] == "roles/storage.objectUser", g.name
        bucket = inputs["bucket"]
        condition = (inputs.get("condition") or {}).get("expression", "")
        objects = f'resource.name.startsWith("projects/_/buckets/{bucket}/objects/{team}/")'
        listing = f'"storage.googleapis.com/objectListPrefix", "").startsWith("{team}/")'
        assert objects in condition and listing in condition, f"{g.name}: {condition!r}"
        others = [t for t in spec.teams if t != team]
        assert not any(f"/objects/{t}/" in condition for t in others), g.name
        seen.add((team, bucket))
    assert seen == {(t, b) for t in spec.teams for b in buckets}


def test_warden_repairs_only_the_cluster_s_own_vms(program, spec):
    """Reset and update need a condition naming this cluster's node VMs in its zones."""
    roles = {r.inputs["roleId"]: r.inputs["permissions"]
             for r in program.of_type("gcp:projects/iAMCustomRole:IAMCustomRole")}  # fmt: skip
    for r in program.of_type("gcp:projects/iAMMember:IAMMember"):
        if "warden" not in r.inputs["member"]:
            continue
        role_id = r.inputs["role"].rsplit("/", 1)[-1]
        mutating = [p for p in roles.get(role_id, []) if p.split(".")[-1] in ("reset", "update")
                    and p.startswith("compute.")]  # fmt: skip
        if not mutating:
            continue
        expression = (r.inputs.get("condition") or {}).get("expression", "")
        clauses = expression.split(" || ")
        assert clauses and all(
            c.startswith(f'resource.name.startsWith("projects/{spec.project}/zones/')
            and f"/gke-{spec.name}-" in c
            for c in clauses
        ), f"{r.name}: {mutating} without a condition on this cluster's VMs: {expression!r}"


def test_versions_pinned(program, spec):
    [release] = program.of_type("kubernetes:helm.sh/v3:Release")
    assert re.fullmatch(r"\d+\.\d+\.\d+", release.inputs["version"])
    assert release.inputs["version"] == CHART_VERSION
    [cluster] = program.of_type("gcp:container/cluster:Cluster")
    assert cluster.inputs["minMasterVersion"] == spec.min_master_version
    assert cluster.inputs["minMasterVersion"].startswith(spec.kubernetes_version)
    assert cluster.inputs["releaseChannel"] == {"channel": spec.release_channel}


def test_cluster_features(program, spec):
    [cluster] = program.of_type("gcp:container/cluster:Cluster")
    c = cluster.inputs
    assert c["datapathProvider"] == "ADVANCED_DATAPATH"
    assert c["enableMultiNetworking"] is True
    assert c["workloadIdentityConfig"] == {"workloadPool": f"{spec.project}.svc.id.goog"}
    assert c["addonsConfig"]["gcsFuseCsiDriverConfig"] == {"enabled": True}
    assert c["monitoringConfig"]["managedPrometheus"] == {"enabled": True}
    assert c["maintenancePolicy"]["recurringWindow"]["recurrence"].startswith("FREQ=WEEKLY")
    assert c["privateClusterConfig"]["masterIpv4CidrBlock"] == spec.network.master_cidr


def test_root_application_points_at_the_cluster_folder(program, cluster_name):
    [app] = program.of_type("kubernetes:argoproj.io/v1alpha1:Application")
    [release] = program.of_type("kubernetes:helm.sh/v3:Release")
    assert app.inputs["spec"]["source"]["path"] == f"kustomize/argocd/{cluster_name}"
    assert app.inputs["spec"]["syncPolicy"]["automated"] == {"prune": True, "selfHeal": True}
    assert release.urn in app.dependencies


def test_every_resource_belongs_to_a_component(program):
    by_urn = program.by_urn()
    for r in program.resources:
        if r.type.startswith(TYPE_PREFIX + ":"):
            assert r.parent is None, r.name
        else:
            assert by_urn[r.parent].type.startswith(TYPE_PREFIX + ":"), r.name


def test_stack_outputs(program, spec):
    out = program.outputs
    assert out["checkpoint_bucket"] == spec.buckets.checkpoints
    assert out["bundle_bucket"] == spec.buckets.bundles
    assert out["registry_url"].endswith(f"/{spec.project}/{spec.registry.repository}")
    assert out["cluster_endpoint"]
    teams = {f"team-{t}" for t in spec.teams}
    assert set(out["service_accounts"]) == {"nodes", "warden", "observability", *teams}
    assert all(
        e.endswith(f"@{spec.project}.iam.gserviceaccount.com")
        for e in out["service_accounts"].values()
    )


def test_future_reservation_where_the_catalog_says_so(program, spec):
    from catalog import accelerator

    futures = {
        r.inputs["reservationName"]: r
        for r in program.of_type("gcp:compute/futureReservation:FutureReservation")
    }
    wanted = [p for p in spec.gpu_pools if p.reservation and p.reservation.future]
    assert set(futures) == {p.reservation.name for p in wanted}
    by_pool = {r.inputs["name"]: r for r in program.of_type("gcp:container/nodePool:NodePool")}
    for pool in wanted:
        fr = futures[pool.reservation.name]
        acc = accelerator(pool.accelerator)
        sku = fr.inputs["specificSkuProperties"]
        assert sku["totalCount"] == str(pool.nodes)
        assert sku["instanceProperties"]["machineType"] == acc.machine_type
        assert len(sku["instanceProperties"]["localSsds"]) == acc.local_ssd_count
        assert fr.inputs["zone"] == pool.zone
        assert fr.inputs["specificReservationRequired"] is True
        pool_config = by_pool[pool.name].inputs["nodeConfig"]
        interval = pool_config.get("hostMaintenancePolicy", {}).get("maintenanceInterval")
        assert sku["instanceProperties"].get("maintenanceInterval") == interval
        assert fr.inputs["timeWindow"]["startTime"].startswith(
            pool.reservation.future.start_time.strftime("%Y-%m-%dT%H:%M:%S")
        )
        assert fr.urn in by_pool[pool.name].dependencies


def test_undelivered_reservations_hold_no_nodes(program, spec):
    """A pool whose future reservation is not delivered would fail `pulumi up` with nodes."""
    by_name = pools(program)
    for pool in spec.gpu_pools:
        if pool.spot:
            continue
        count = by_name[pool.name].get("nodeCount")
        if pool.name in spec.awaiting_delivery():
            assert count == 0, f"{pool.name}: undelivered reservation with {count} nodes"
        else:
            assert count == pool.nodes
