"""Table tests of the pure derivations in infra.derive."""

from __future__ import annotations

import ipaddress

import pytest

from catalog import Cluster, load_cluster
from catalog import labels as names
from infra import derive


def with_pool(base: str, **pool) -> tuple[Cluster, object]:
    cluster = load_cluster(base)
    data = cluster.model_dump()
    data["gpu_pools"] = [{**data["gpu_pools"][0], **pool}]
    changed = Cluster.model_validate(data)
    return changed, changed.gpu_pools[0]


@pytest.mark.parametrize(
    ("reservation", "uri"),
    [
        ({"name": "r1"}, "projects/reve-train-mega/reservations/r1"),
        (
            {"name": "r1", "block": "b7"},
            "projects/reve-train-mega/reservations/r1/reservationBlocks/b7",
        ),
        ({"name": "r1", "project": "shared"}, "projects/shared/reservations/r1"),
    ],
)
def test_reservation_uri(reservation, uri):
    cluster, pool = with_pool("mega-euw4", reservation=reservation)
    assert derive.reservation_uri(cluster, pool) == uri


def test_reservation_uri_of_spot_pool_is_an_error():
    cluster, pool = with_pool("mega-euw4", reservation=None, spot=True)
    with pytest.raises(ValueError, match="no reservation"):
        derive.reservation_uri(cluster, pool)


@pytest.mark.parametrize(
    ("spot", "taints"),
    [(False, [names.GPU_TAINT]), (True, [names.GPU_TAINT, names.SPOT_TAINT])],
)
def test_pool_taints(spot, taints):
    extra = {"reservation": None, "spot": True} if spot else {}
    _, pool = with_pool("ultra-usc1", **extra)
    assert derive.pool_taints(pool) == taints


@pytest.mark.parametrize(
    ("effect", "gke"),
    [
        ("NoSchedule", "NO_SCHEDULE"),
        ("NoExecute", "NO_EXECUTE"),
        ("PreferNoSchedule", "PREFER_NO_SCHEDULE"),
    ],
)
def test_gke_taint_effect(effect, gke):
    assert derive.gke_taint({"key": "k", "value": "v", "effect": effect}) == {
        "key": "k",
        "value": "v",
        "effect": gke,
    }


def test_mega_nics_one_vpc_each():
    nics = derive.nic_networks(load_cluster("mega-euw4"))
    assert [n.name for n in nics] == [f"vpc{i}" for i in range(1, 9)]
    assert len({n.vpc for n in nics}) == 8
    assert {n.device_mode for n in nics} == {"NetDevice"}
    assert {n.zone for n in nics} == {None}
    assert {ipaddress.ip_network(n.cidr).prefixlen for n in nics} == {19}


def test_ultra_nics_gvnic_vpc_and_one_rdma_vpc():
    nics = derive.nic_networks(load_cluster("ultra-usc1"))
    gvnic, rdma = nics[0], nics[1:]
    assert gvnic.name == "gvnic-1" and gvnic.device_mode == "NetDevice" and gvnic.zone is None
    assert [n.name for n in rdma] == [f"rdma-{i}" for i in range(8)]
    assert {n.vpc for n in rdma} == {"ultra-usc1-rdma-us-central1-b"}
    assert {n.device_mode for n in rdma} == {"RDMA"}
    assert {n.mtu for n in nics} == {8896}


@pytest.mark.parametrize("name", ["mega-euw4", "ultra-usc1"])
def test_nic_subnets_disjoint_inside_gpu_cidr(name):
    cluster = load_cluster(name)
    base = ipaddress.ip_network(cluster.network.gpu_cidr)
    nets = [ipaddress.ip_network(n.cidr) for n in derive.nic_networks(cluster)]
    assert all(n.subnet_of(base) for n in nets)
    assert all(not a.overlaps(b) for i, a in enumerate(nets) for b in nets[i + 1 :])


@pytest.mark.parametrize(
    ("name", "url"),
    [
        ("mega-euw4", "europe-docker.pkg.dev/reve-train-mega/training"),
        ("ultra-usc1", "us-docker.pkg.dev/reve-train-ultra/training"),
    ],
)
def test_registry_url(name, url):
    assert derive.registry_url(load_cluster(name)) == url


def test_ksa_member():
    cluster = load_cluster("ultra-usc1")
    assert derive.ksa_member(cluster, "research", "training") == (
        "serviceAccount:reve-train-ultra.svc.id.goog[research/training]"
    )


@pytest.mark.parametrize(
    ("base", "spot", "interval"),
    [("mega-euw4", False, "PERIODIC"), ("mega-euw4", True, None), ("ultra-usc1", False, None)],
)
def test_host_maintenance_interval(base, spot, interval):
    extra = {"reservation": None, "spot": True} if spot else {}
    _, pool = with_pool(base, **extra)
    assert derive.host_maintenance_interval(pool) == interval


@pytest.mark.parametrize(("base", "interval"), [("mega-euw4", "PERIODIC"), ("ultra-usc1", None)])
def test_future_reservation_sku_matches_the_pool(base, interval):
    from infra.components.reservations import instance_properties

    _, pool = with_pool(base)
    props = instance_properties(pool)
    assert props.get("maintenance_interval") == interval
    assert props["machine_type"] == {"mega-euw4": "a3-megagpu-8g"}.get(base, "a3-ultragpu-8g")
    assert len(props["local_ssds"]) == {"mega-euw4": 16}.get(base, 32)


def test_team_bucket_condition_names_the_team_prefix_only():
    condition = derive.team_bucket_condition("reve-x-checkpoints", "media")
    assert condition["expression"] == (
        'resource.name.startsWith("projects/_/buckets/reve-x-checkpoints/objects/media/") || '
        '(resource.type == "storage.googleapis.com/Bucket" && '
        'api.getAttribute("storage.googleapis.com/objectListPrefix", "").startsWith("media/"))'
    )
    assert condition["title"] == "team media only"


def test_warden_condition_covers_each_zone_of_the_cluster():
    mega = load_cluster("mega-euw4")
    expression = derive.warden_instance_condition(mega)["expression"]
    clauses = expression.split(" || ")
    assert len(clauses) == 2 * len(mega.zones)
    for zone in mega.zones:
        assert (
            f'resource.name.startsWith("projects/{mega.project}/zones/{zone}/instances/'
            f'gke-mega-euw4-")'
        ) in clauses


@pytest.mark.parametrize(
    ("cluster", "team", "account"),
    [("ultra-usc1", "research", "ultra-usc1-team-research"), ("mega-euw4", "media",
     "mega-euw4-team-media")],
)  # fmt: skip
def test_team_account_id(cluster, team, account):
    assert derive.team_account_id(load_cluster(cluster), team) == account
