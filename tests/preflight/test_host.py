"""Host checks against a prepared folder tree and the accelerator catalog."""

from __future__ import annotations

from pathlib import Path

import pytest

from catalog import accelerator
from runner.preflight import host
from runner.preflight.rows import FAIL, PASS, SKIP, WARN


def build_node(root: Path, key: str) -> None:
    """A container filesystem that has everything the catalog says `key` needs."""
    acc = accelerator(key)
    for mount in host._pod(acc, None).mounts:  # every mount a whole-node pod gets
        (root / mount["mount_path"].lstrip("/")).mkdir(parents=True, exist_ok=True)
    for _, pattern in host.required_files(acc):
        path = root / pattern.lstrip("/").replace("*", "")
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():  # some are folders that a mount already made
            path.write_text("")
    for entry in acc.network.interfaces():
        folder = root / "sys/class/net" / entry["interfaceName"]
        folder.mkdir(parents=True)
        (folder / "mtu").write_text(
            f"{acc.network.mtu if entry['network'] != 'default' else 1460}\n"
        )
    for i in range(sum(m == "RDMA" for m in acc.network.device_mode.values())):
        (root / f"sys/class/infiniband/mlx5_{i}").mkdir(parents=True)


@pytest.mark.parametrize("key", ["H100", "H200"])
def test_prepared_node_passes(tmp_path, key):
    build_node(tmp_path, key)
    acc = accelerator(key)
    assert host.mounts(acc, tmp_path).result == PASS
    assert host.libraries(acc, tmp_path).result == PASS
    assert host.nics(acc, tmp_path).result == PASS


def test_required_files_come_from_the_catalog():
    needs = dict(host.required_files(accelerator("H200")))
    assert needs["NCCL net plugin"] == "/usr/local/gib/lib64/libnccl-net*.so*"
    assert needs["NCCL_TUNER_CONFIG_PATH"] == "/usr/local/gib/configs/tuner_config_a3u.txtpb"
    mega = dict(host.required_files(accelerator("H100")))
    assert mega["NCCL tuner plugin"] == "/usr/local/nvidia/lib64/libnccl-tuner.so"


def test_missing_plugin_and_mount_fail(tmp_path):
    build_node(tmp_path, "H200")
    for plugin in (tmp_path / "usr/local/gib/lib64").glob("libnccl-net*"):
        plugin.unlink()
    row = host.libraries(accelerator("H200"), tmp_path)
    assert row.result == FAIL and "NCCL net plugin" in row.detail
    import shutil

    shutil.rmtree(tmp_path / "usr/local/gib")
    row = host.mounts(accelerator("H200"), tmp_path)
    assert row.result == FAIL and "/usr/local/gib" in row.detail


def test_wrong_mtu_and_missing_nic(tmp_path):
    build_node(tmp_path, "H100")
    (tmp_path / "sys/class/net/eth3/mtu").write_text("1460\n")
    import shutil

    shutil.rmtree(tmp_path / "sys/class/net/eth8")
    row = host.nics(accelerator("H100"), tmp_path)
    assert row.result == FAIL
    assert "eth3 MTU 1460 (want 8244)" in row.detail and "eth8 (vpc8) missing" in row.detail


def test_rdma_devices_counted(tmp_path):
    build_node(tmp_path, "H200")
    import shutil

    shutil.rmtree(tmp_path / "sys/class/infiniband/mlx5_7")
    row = host.nics(accelerator("H200"), tmp_path)
    assert row.result == FAIL and "7 RDMA devices (want 8)" in row.detail


def test_nccl_env_equal_to_catalog():
    acc = accelerator("H100")
    good = host.expected_nccl_env(acc)  # the catalog's values plus NCCL Inspector's
    assert acc.nccl_env.items() <= good.items() and "NCCL_PROFILER_PLUGIN" in good
    assert host.nccl_env(acc, good).result == PASS
    wrong = {**good, "NCCL_NVLSTREE_MAX_CHUNKSIZE": "65536"}
    del wrong["NCCL_PROTO"]
    row = host.nccl_env(acc, wrong)
    assert row.result == FAIL
    assert "NCCL_NVLSTREE_MAX_CHUNKSIZE=65536 (want 131072)" in row.detail
    assert "NCCL_PROTO=<unset>" in row.detail


def test_gpu_checks_skip_without_accelerator(tmp_path):
    rows = [host.mounts(None), host.libraries(None), host.nccl_env(None, {}), host.nics(None)]
    assert {(r.result, r.detail) for r in rows} == {(SKIP, "no GPU")}


def test_memory_against_machine(tmp_path):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/meminfo").write_text("MemTotal:       3095420928 kB\nMemFree: 1 kB\n")
    assert host.memory(accelerator("H200"), tmp_path).result == PASS
    (tmp_path / "proc/meminfo").write_text("MemTotal:       1048576000 kB\n")
    row = host.memory(accelerator("H200"), tmp_path)
    assert row.result == FAIL and "expected about 2952 GiB" in row.detail


def test_shm_and_writable(tmp_path):
    assert host.shm(None, str(tmp_path), Path("/")).result in (PASS, WARN)
    row = host.shm("100Ti", str(tmp_path), Path("/"))
    assert row.result == FAIL and "run asks for 100Ti" in row.detail
    assert host.shm(None, "/no/such/dir").result == FAIL
    assert host.writable([str(tmp_path)]).result == PASS
    row = host.writable([str(tmp_path), "/no/such/dir"])
    assert row.result == FAIL and "/no/such/dir" in row.detail


@pytest.mark.parametrize("key", ["H100", "H200"])
def test_a_partial_node_pod_is_checked_for_sockets_not_gpudirect(tmp_path, key):
    """What runner.gpupod gives a pod on part of a node: driver libraries, eth0, sockets."""
    from runner.gpupod import SOCKET_NCCL_ENV

    acc = accelerator(key)
    for _, pattern in host.required_files(acc, gpus=1):
        path = tmp_path / pattern.lstrip("/").replace("*", "")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    for mount in host._pod(acc, 1).mounts:  # the driver libraries and NCCL Inspector's folder
        (tmp_path / mount["mount_path"].lstrip("/")).mkdir(parents=True, exist_ok=True)
    (tmp_path / "sys/class/net/eth0").mkdir(parents=True)
    assert [what for what, _ in host.required_files(acc, gpus=1)] == ["CUDA driver", "NVML"]
    assert host.mounts(acc, tmp_path, gpus=1).result == PASS
    assert host.libraries(acc, tmp_path, gpus=1).result == PASS
    assert host.nics(acc, tmp_path, gpus=1).result == PASS
    assert SOCKET_NCCL_ENV.items() <= host.expected_nccl_env(acc, 1).items()
    assert host.nccl_env(acc, host.expected_nccl_env(acc, 1), gpus=1).result == PASS
    assert host.nccl_env(acc, dict(acc.nccl_env), gpus=1).result == FAIL
    assert host.nics(acc, tmp_path).result == FAIL  # a whole-node pod needs the GPU NICs
