"""The network path of cross-region DiLoCo: VPC peering both ways, one narrow firewall rule.

Table tests of `infra.cross_region`, the peering and firewall each stack declares under
mocks, and the one-line errors for peers that are unknown or whose ranges overlap.
"""

from __future__ import annotations

import ipaddress

import pytest
import yaml

from catalog import Cluster, InputError, load_cluster
from infra import cross_region, validate
from infra.mocks import ProgramRun, run

from .conftest import CLUSTERS

PEERING = "gcp:compute/networkPeering:NetworkPeering"
FIREWALL = "gcp:compute/firewall:Firewall"


def cluster(base: str, **changes) -> Cluster:
    data = load_cluster(base).model_dump()
    for key, value in changes.items():
        if key == "network":
            data["network"] = {**data["network"], **value}
        else:
            data[key] = value
    return Cluster.model_validate(data)


def opted_in(peers: list[str], port: int = 5555) -> dict:
    return {"teams": ["research"], "peers": peers, "port": port}


# --- pure derivations ---------------------------------------------------------------------


def test_network_link_is_the_project_and_the_vpc_infra_names():
    mega = load_cluster("mega-euw4")
    assert cross_region.vpc_name(mega) == "mega-euw4"
    assert cross_region.network_link(mega) == "projects/reve-train-mega/global/networks/mega-euw4"
    assert cross_region.peering_name(mega, "ultra-usc1") == "mega-euw4-to-ultra-usc1"


def _catalog(**cross) -> dict[str, Cluster]:
    """mega-euw4, ultra-usc1 and a third cluster `c3` with the given cross_region settings."""
    out = {
        "mega-euw4": cluster("mega-euw4", cross_region=cross.get("mega-euw4")),
        "ultra-usc1": cluster("ultra-usc1", cross_region=cross.get("ultra-usc1")),
    }
    out["c3"] = cluster("mega-euw4", name="c3", cross_region=cross.get("c3"))
    return out


@pytest.mark.parametrize(
    ("cross", "name", "expected"),
    [
        ({}, "ultra-usc1", []),
        ({"ultra-usc1": opted_in(["mega-euw4"])}, "ultra-usc1", ["mega-euw4"]),  # dial in
        ({"ultra-usc1": opted_in(["mega-euw4"])}, "mega-euw4", ["ultra-usc1"]),  # dial out
        ({"ultra-usc1": opted_in(["mega-euw4"])}, "c3", []),
        (  # both ways at once: still one peering
            {"ultra-usc1": opted_in(["mega-euw4"]), "mega-euw4": opted_in(["ultra-usc1"])},
            "mega-euw4",
            ["ultra-usc1"],
        ),
        (
            {"ultra-usc1": opted_in(["mega-euw4"]), "c3": opted_in(["mega-euw4"])},
            "mega-euw4",
            ["c3", "ultra-usc1"],
        ),
        ({"ultra-usc1": opted_in(["mega-euw4", "c3"])}, "ultra-usc1", ["c3", "mega-euw4"]),
    ],
)
def test_partners(cross, name, expected):
    catalog = _catalog(**cross)
    assert cross_region.partners(catalog[name], catalog) == expected


def test_sync_ingress_opens_the_port_to_the_peers_pod_ranges_in_peer_order():
    catalog = _catalog(**{"ultra-usc1": opted_in(["mega-euw4", "c3"], port=6000)})
    rule = cross_region.sync_ingress(catalog["ultra-usc1"], catalog)
    assert rule == cross_region.SyncIngress(
        name="ultra-usc1-cross-region-sync",
        sources=(catalog["mega-euw4"].network.pods_cidr, catalog["c3"].network.pods_cidr),
        port=6000,
    )
    assert cross_region.sync_ingress(catalog["mega-euw4"], catalog) is None  # learners only


@pytest.mark.parametrize(
    ("network", "expected"),
    [
        ({}, None),  # the example clusters can be peered
        ({"pods_cidr": "10.0.0.0/14"}, ("network.primary_cidr", "mega-euw4's network.pods_cidr")),
        ({"primary_cidr": "10.5.0.0/20"}, ("network.pods_cidr", "mega-euw4's network.primary")),
        ({"services_cidr": "10.0.32.0/20"}, ("network.services_cidr", "network.services_cidr")),
        ({"master_cidr": "172.16.0.0/28"}, None),  # Google's VPC: not exchanged
        ({"gpu_cidr": "192.168.0.0/16"}, None),  # the NIC VPCs are not peered
    ],
)
def test_overlap(network, expected):
    ultra = load_cluster("ultra-usc1")
    mega = cluster("mega-euw4", network=network)
    found = cross_region.overlap(ultra, mega)
    if expected is None:
        assert found is None
    else:
        assert found[0] == expected[0] and expected[1] in found[1]


# --- what each stack declares ---------------------------------------------------------------


def peerings(program: ProgramRun) -> dict[str, dict]:
    return {r.inputs["name"]: r.inputs for r in program.of_type(PEERING)}


def test_each_stack_declares_its_side_toward_the_other(programs):
    """A peering is active only when both networks declare it: every side has its mate."""
    links = {name: cross_region.network_link(load_cluster(name)) for name in CLUSTERS}
    sides = set()
    for name in CLUSTERS:
        for peering_name, inputs in peerings(programs[name]).items():
            peer = peering_name.removeprefix(f"{name}-to-")
            assert inputs["network"] == f"{name}-id"  # this stack's primary VPC
            assert inputs["peerNetwork"] == links[peer]
            sides.add((name, peer))
    assert sides == {("ultra-usc1", "mega-euw4"), ("mega-euw4", "ultra-usc1")}


def test_peerings_exchange_only_private_subnet_routes(program):
    for inputs in peerings(program).values():
        assert inputs["exportCustomRoutes"] is False and inputs["importCustomRoutes"] is False
        assert inputs["exportSubnetRoutesWithPublicIp"] is False
        assert inputs["importSubnetRoutesWithPublicIp"] is False
        assert inputs["stackType"] == "IPV4_ONLY"


def test_the_synchronizer_port_is_open_to_the_peers_pods_only(program, spec):
    """A cluster hosting synchronizers (ultra-usc1, for mega-euw4's learners) has one rule:
    one port, the peers' pod ranges, this cluster's nodes; no other rule of the cluster
    admits any peered range of a peer. A learner-only cluster has no such rule."""
    rules = {r.inputs["name"]: r.inputs for r in program.of_type(FIREWALL)}
    rule = rules.pop(f"{spec.name}-cross-region-sync", None)
    if spec.cross_region is None:
        assert rule is None
        return
    peers = [load_cluster(p) for p in spec.cross_region.peers]
    assert rule["network"] == f"{spec.name}-id" and rule["direction"] == "INGRESS"
    assert rule["sourceRanges"] == [p.network.pods_cidr for p in peers]
    assert rule["allows"] == [{"protocol": "tcp", "ports": [str(spec.cross_region.port)]}]
    assert rule.get("targetServiceAccounts") == [program.outputs["service_accounts"]["nodes"]]
    assert "denies" not in rule and "targetTags" not in rule
    peered = [
        ipaddress.ip_network(getattr(p.network, key))
        for p in peers
        for key in cross_region.PEERED_RANGES
    ]
    for name, other in rules.items():
        sources = [ipaddress.ip_network(s) for s in other.get("sourceRanges", [])]
        assert not any(s.overlaps(p) for s in sources for p in peered), name


def test_a_learner_only_cluster_opens_nothing(programs):
    program = programs["mega-euw4"]
    assert [r.name for r in program.of_type(PEERING)] == ["mega-euw4-to-ultra-usc1"]
    names = [r.inputs["name"] for r in program.of_type(FIREWALL)]
    assert not [n for n in names if "cross-region" in n]


# --- bad peers fail with one line before any resource ---------------------------------------


def write(root, name: str, base: str, change=lambda d: None) -> None:
    data = load_cluster(base).model_dump(mode="json", exclude_none=True)
    data["name"] = name
    change(data)
    folder = root / "clusters" / name
    folder.mkdir(parents=True)
    (folder / "cluster.yaml").write_text(yaml.safe_dump(data))


def overlapping_pods(d):
    d["network"]["pods_cidr"] = "10.4.0.0/16"  # inside ultra-usc1's 10.4.0.0/14


def third_cluster(d):
    d["cross_region"]["peers"].append("c3")


@pytest.mark.parametrize(
    ("stack", "ultra", "mega", "c3", "field", "message"),
    [
        (
            "ultra-usc1",
            lambda d: d["cross_region"]["peers"].append("mars-1"),
            None,
            None,
            "cross_region.peers[1]",
            "unknown cluster 'mars-1'",
        ),
        (
            "ultra-usc1",
            None,
            overlapping_pods,
            None,
            "network.pods_cidr",
            "10.4.0.0/14 overlaps mega-euw4's network.pods_cidr 10.4.0.0/16: the VPCs are "
            "peered (cross_region.peers)",
        ),
        (  # the learners' side finds the clash too, naming who peers with it
            "mega-euw4",
            None,
            overlapping_pods,
            None,
            "network.pods_cidr",
            "10.4.0.0/16 overlaps ultra-usc1's network.pods_cidr 10.4.0.0/14: the VPCs are "
            "peered (ultra-usc1's cross_region.peers)",
        ),
        (  # two peers of one network may not overlap each other
            "ultra-usc1",
            third_cluster,
            None,
            lambda d: None,
            "cross_region.peers",
            "c3's network.primary_cidr 10.10.0.0/20 overlaps mega-euw4's",
        ),
    ],
)
def test_bad_peers_fail_before_any_resource(tmp_path, stack, ultra, mega, c3, field, message):
    write(tmp_path, "ultra-usc1", "ultra-usc1", ultra or (lambda d: None))
    write(tmp_path, "mega-euw4", "mega-euw4", mega or (lambda d: None))
    if c3:
        write(tmp_path, "c3", "mega-euw4", c3)
    record = ProgramRun()
    with pytest.raises(InputError) as err:
        run(stack, root=tmp_path, record=record)
    line = err.value.line()
    assert "\n" not in line
    assert f"clusters/{stack}/cluster.yaml: {field}: " in line
    assert message in line
    assert record.resources == []


def test_peers_of_the_example_clusters():
    assert list(validate.peers(load_cluster("ultra-usc1"))) == ["mega-euw4"]
    assert list(validate.peers(load_cluster("mega-euw4"))) == ["ultra-usc1"]
