"""Per-cluster network checks: the right GPU NIC networks and NIC counts exist."""

from __future__ import annotations

import ipaddress

from .conftest import pools

VPC = "gcp:compute/network:Network"
SUBNET = "gcp:compute/subnetwork:Subnetwork"
FIREWALL = "gcp:compute/firewall:Firewall"
PARAMSET = "kubernetes:networking.gke.io/v1:GKENetworkParamSet"
NETWORK = "kubernetes:networking.gke.io/v1:Network"


def vpcs(program) -> dict[str, dict]:
    return {r.inputs["name"]: r.inputs for r in program.of_type(VPC)}


def subnets_by_vpc(program) -> dict[str, list[dict]]:
    """Subnet inputs grouped by the VPC they belong to (the mock id is '<vpc>-id')."""
    out: dict[str, list[dict]] = {}
    for r in program.of_type(SUBNET):
        out.setdefault(r.inputs["network"].removesuffix("-id"), []).append(r.inputs)
    return out


def paramsets(program) -> dict[str, dict]:
    return {r.inputs["metadata"]["name"]: r.inputs["spec"] for r in program.of_type(PARAMSET)}


def test_mega_has_eight_gpu_nic_vpcs(programs):
    program = programs["mega-euw4"]
    nets = vpcs(program)
    gpu = [f"mega-euw4-vpc{i}" for i in range(1, 9)]
    assert set(nets) == {"mega-euw4", *gpu}
    assert all(nets[n]["mtu"] == 8244 and "networkProfile" not in nets[n] for n in gpu)
    by_vpc = subnets_by_vpc(program)
    assert all(len(by_vpc[n]) == 1 for n in gpu)
    sets = paramsets(program)
    assert set(sets) == {f"vpc{i}" for i in range(1, 9)}
    assert {s["deviceMode"] for s in sets.values()} == {"NetDevice"}
    assert {r.inputs["metadata"]["name"] for r in program.of_type(NETWORK)} == set(sets)
    firewalled = {r.inputs["network"].removesuffix("-id") for r in program.of_type(FIREWALL)}
    assert set(gpu) <= firewalled


def test_ultra_has_gvnic_and_rdma_vpc_with_eight_subnets(programs):
    program = programs["ultra-usc1"]
    nets = vpcs(program)
    rdma = "ultra-usc1-rdma-us-central1-b"
    assert set(nets) == {"ultra-usc1", "ultra-usc1-gvnic-1", rdma}
    assert nets[rdma]["networkProfile"] == (
        "projects/reve-train-ultra/global/networkProfiles/us-central1-b-vpc-roce"
    )
    assert nets[rdma]["mtu"] == 8896
    by_vpc = subnets_by_vpc(program)
    assert sorted(s["name"] for s in by_vpc[rdma]) == [f"ultra-usc1-rdma-{i}" for i in range(8)]
    assert len(by_vpc["ultra-usc1-gvnic-1"]) == 1
    sets = paramsets(program)
    assert sets["gvnic-1"]["deviceMode"] == "NetDevice"
    assert {sets[f"rdma-{i}"]["deviceMode"] for i in range(8)} == {"RDMA"}
    assert {sets[f"rdma-{i}"]["vpc"] for i in range(8)} == {rdma}
    firewalled = {r.inputs["network"].removesuffix("-id") for r in program.of_type(FIREWALL)}
    assert rdma not in firewalled
    assert "ultra-usc1-gvnic-1" in firewalled


def test_gpu_pools_attach_every_nic_in_interface_order(program, spec):
    from catalog import accelerator

    subnet_vpc = {
        r.inputs["name"]: r.inputs["network"].removesuffix("-id") for r in program.of_type(SUBNET)
    }
    by_name = pools(program)
    for pool in spec.gpu_pools:
        nics = by_name[pool.name]["networkConfig"]["additionalNodeNetworkConfigs"]
        wanted = accelerator(pool.accelerator).network.networks
        assert len(nics) == len(wanted)
        assert [n["subnetwork"] for n in nics] == [f"{spec.name}-{w}" for w in wanted]
        assert all(subnet_vpc[n["subnetwork"]] == n["network"] for n in nics)


def test_primary_subnet_has_pod_and_service_ranges_and_nat(program, spec):
    [primary] = [r.inputs for r in program.of_type(SUBNET) if r.inputs["name"] == spec.name]
    assert primary["ipCidrRange"] == spec.network.primary_cidr
    assert primary["privateIpGoogleAccess"] is True
    ranges = {r["rangeName"]: r["ipCidrRange"] for r in primary["secondaryIpRanges"]}
    assert ranges == {"pods": spec.network.pods_cidr, "services": spec.network.services_cidr}
    [nat] = program.of_type("gcp:compute/routerNat:RouterNat")
    assert nat.inputs["sourceSubnetworkIpRangesToNat"] == "ALL_SUBNETWORKS_ALL_IP_RANGES"


def test_all_subnets_disjoint(program):
    nets = [ipaddress.ip_network(r.inputs["ipCidrRange"]) for r in program.of_type(SUBNET)]
    assert all(not a.overlaps(b) for i, a in enumerate(nets) for b in nets[i + 1 :])
