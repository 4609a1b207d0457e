"""GKE version floors per accelerator: a cluster below its accelerator's floor is refused."""

from pathlib import Path

import pytest
import yaml

from catalog import InputError, accelerator, cluster_names, load_cluster
from catalog.loader import load_cluster_file
from catalog.schema import gke_version_key

H100_FLOOR = accelerator("H100").gke_version_floor


@pytest.mark.parametrize(
    ("minor", "version", "problem"),
    [
        ("1.32", "1.32.11-gke.1174000", None),
        ("1.32", "1.32.12-gke.1000", None),
        ("1.32", "1.32.11-gke.1173999", "1.32.11-gke.1173999 is below 1.32.11-gke.1174000"),
        ("1.31", "1.31.9-gke.2000000", "1.31.9-gke.2000000 is below 1.31.14-gke.1243000"),
        ("1.32", None, "minor 1.32 alone does not guarantee 1.32.11-gke.1174000"),
        ("1.33", None, None),
        ("1.27", None, "1.27 is older than 1.28"),
    ],
)
def test_floor_table(minor, version, problem):
    got = H100_FLOOR.problem(minor, version)
    if problem is None:
        assert got is None
    else:
        assert got is not None and problem in got


def test_version_order_is_numeric():
    assert gke_version_key("1.32.11-gke.1174000") > gke_version_key("1.32.9-gke.9999999")
    assert gke_version_key("1.33") > gke_version_key("1.32.11-gke.1174000")


def test_every_example_cluster_meets_its_floors():
    for name in cluster_names():
        cluster = load_cluster(name)
        for key in cluster.accelerators():
            floor = accelerator(key).gke_version_floor
            if floor:
                assert floor.problem(cluster.kubernetes_version, cluster.gke_version) is None


@pytest.mark.parametrize(
    ("change", "line"),
    [
        (
            {"gke_version": "1.32.2-gke.1182000"},
            "gke_version: 1.32.2-gke.1182000 is below 1.32.11-gke.1174000, the floor for H100",
        ),
        ({"gke_version": None}, "kubernetes_version: minor 1.32 alone does not guarantee"),
        ({"gke_version": "1.33.1-gke.100"}, "gke_version: 1.33.1-gke.100 is not a 1.32 version"),
        ({"gke_version": "1.32.11"}, "gke_version: String should match pattern"),
    ],
)
def test_cluster_file_below_the_floor_fails_with_one_line(tmp_path: Path, change, line):
    data = yaml.safe_load(Path("clusters/mega-euw4/cluster.yaml").read_text())
    data.update(change)
    data = {k: v for k, v in data.items() if v is not None}
    path = tmp_path / "clusters" / "mega-euw4" / "cluster.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError) as err:
        load_cluster_file(path, "clusters/mega-euw4/cluster.yaml")
    assert err.value.line().startswith("clusters/mega-euw4/cluster.yaml: " + line.split(":")[0])
    assert line.split(": ", 1)[1] in err.value.line()
    assert "\n" not in err.value.line()


def test_addons_named_for_gpudirect_accelerators():
    assert accelerator("H100").node_addons == ["nccl-tcpxo-installer", "nri-device-injector"]
    assert accelerator("H200").node_addons == ["nccl-rdma-installer"]
