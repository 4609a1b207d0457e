"""The catalogs load, and bad cluster files fail with one line naming file and field."""

from pathlib import Path

import pytest
import yaml

from catalog import InputError, accelerator, accelerators, cluster_names, load_cluster
from catalog.loader import load_cluster_file
from catalog.quantity import QuantityError, format_bytes, parse_bytes, parse_cpu


def test_both_example_clusters_load():
    assert cluster_names() == ["mega-euw4", "ultra-usc1"]
    ultra, mega = load_cluster("ultra-usc1"), load_cluster("mega-euw4")
    assert ultra.accelerators() == ["H200"] and mega.accelerators() == ["H100"]
    assert ultra.region != mega.region


@pytest.mark.parametrize(
    ("key", "machine", "label", "nics", "transport"),
    [
        ("H100", "a3-megagpu-8g", "nvidia-h100-mega-80gb", 8, "tcpxo"),
        ("H200", "a3-ultragpu-8g", "nvidia-h200-141gb", 9, "rdma"),
    ],
)
def test_accelerator_entries(key, machine, label, nics, transport):
    entry = accelerator(key)
    assert (entry.machine_type, entry.gke_accelerator) == (machine, label)
    assert entry.gpus_per_node == 8
    assert len(entry.network.networks) == nics
    assert entry.network.transport == transport
    assert entry.allocatable_cpu < entry.node_cpus
    assert entry.allocatable_memory_bytes < entry.node_memory_gib * 2**30


def test_tcpxo_interfaces_line_up_with_nccl_ifnames():
    h100 = accelerator("H100")
    eths = [row["interfaceName"] for row in h100.network.interfaces()[1:]]
    assert ",".join(eths) == h100.nccl_env["NCCL_FASTRAK_IFNAME"]


def test_unknown_accelerator_names_known_ones():
    with pytest.raises(InputError, match=r"unknown accelerator 'B300' \(known: H100, H200\)"):
        accelerator("B300", "run.yaml")
    assert set(accelerators()) == {"H100", "H200"}


def _write(tmp_path: Path, name: str, data: dict) -> Path:
    path = tmp_path / "clusters" / name / "cluster.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump(data))
    return path


def _base() -> dict:
    return yaml.safe_load(Path("clusters/ultra-usc1/cluster.yaml").read_text())


def _mutate(data: dict, dotted: str, value) -> dict:
    node = data
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = node[int(part)] if part.isdigit() else node[part]
    last = parts[-1]
    if value is _DELETE:
        del node[last]
    else:
        node[last] = value
    return data


_DELETE = object()

BAD_CLUSTERS = [
    ("gpu_pools.0.accelerator", "B300", "gpu_pools[0].accelerator: unknown accelerator 'B300'"),
    ("gpu_pools.0.reservation", _DELETE, "gpu_pools[0].reservation: required for a non-spot"),
    ("network.pods_cidr", "10.0.0.0/16", "network: primary_cidr 10.0.0.0/20 overlaps pods_cidr"),
    ("network.gpu_cidr", "999.0.0.0/8", "network.gpu_cidr: "),
    ("colour", "blue", "colour: unknown key"),
    ("project", _DELETE, "project: required key is missing"),
    ("gpu_pools.0.zone", "us-east1-b", "gpu_pools[0].zone"),
    ("cpu_pool.allocatable_memory", "lots", "cpu_pool.allocatable_memory"),
    ("name", "other", "name: 'other' must equal its folder name"),
]


@pytest.mark.parametrize(("field", "value", "message"), BAD_CLUSTERS)
def test_bad_cluster_is_one_line_naming_file_and_field(tmp_path, field, value, message):
    path = _write(tmp_path, "ultra-usc1", _mutate(_base(), field, value))
    with pytest.raises(InputError) as caught:
        load_cluster_file(path, "clusters/ultra-usc1/cluster.yaml")
    line = caught.value.line()
    assert "\n" not in line
    assert line.startswith("clusters/ultra-usc1/cluster.yaml: ")
    assert message in line


@pytest.mark.parametrize(("text", "cores"), [("8", 8.0), ("500m", 0.5), (7.5, 7.5), ("0.25", 0.25)])
def test_parse_cpu(text, cores):
    assert parse_cpu(text) == cores


@pytest.mark.parametrize(
    ("text", "count"), [("512Gi", 512 * 2**30), ("1Ti", 2**40), ("64G", 64 * 10**9), (100, 100)]
)
def test_parse_bytes(text, count):
    assert parse_bytes(text) == count


@pytest.mark.parametrize("text", ["lots", "12Gb", "-1", "1.2.3Gi", ""])
def test_bad_quantities(text):
    with pytest.raises(QuantityError):
        parse_bytes(text)


@pytest.mark.parametrize(
    ("count", "text"), [(2**40, "1Ti"), (3 * 2**39, "1.5Ti"), (640 * 2**30, "640Gi"), (5, "5")]
)
def test_format_bytes(count, text):
    assert format_bytes(count) == text
