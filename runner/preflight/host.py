"""Host checks: memory, /dev/shm, mounts present and writable, GPU libraries and the NCCL
transport (environment and NICs) against the accelerator catalog.

Every expected figure comes from `catalog.accelerator(key)`, and what a pod on `gpus` GPUs
gets from `runner.gpupod.gpu_settings` (the whole-node rule: a partial-node pod has the
default network and NCCL sockets, no GPUDirect NICs, plugin or NCCL values; `gpus` None
means the whole node). `root` prefixes absolute paths so tests can point the checks at a
prepared folder tree.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from catalog.quantity import parse_bytes
from catalog.schema import Accelerator
from runner.gpupod import GpuSettings, gpu_settings
from runner.preflight.rows import FAIL, NO_GPU, PASS, SKIP, WARN, Row

GIB = 1 << 30
MIN_SHM = GIB  # below this, data loader workers and NCCL's shared-memory transport fail


def _at(root: Path, path: str) -> Path:
    return root / path.lstrip("/")


def _pod(acc: Accelerator, gpus: int | None) -> GpuSettings:
    """What the pod was given: the settings runner renders for `gpus` GPUs of `acc`."""
    return gpu_settings(acc, gpus or acc.gpus_per_node)


def expected_nccl_env(acc: Accelerator, gpus: int | None = None) -> dict[str, str]:
    """The NCCL variables a pod on `gpus` GPUs gets (the catalog's on a whole node)."""
    return {k: v for k, v in _pod(acc, gpus).env.items() if k.startswith("NCCL_")}


def mem_total(meminfo: str) -> int:
    """Bytes of MemTotal in /proc/meminfo text."""
    for line in meminfo.splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    raise ValueError("MemTotal missing from /proc/meminfo")


def memory(acc: Accelerator | None, root: Path = Path("/")) -> Row:
    total = mem_total(_at(root, "/proc/meminfo").read_text())
    detail = f"{total / GIB:.0f} GiB"
    if acc is None:
        return Row("memory", PASS, detail)
    want = acc.node_memory_gib * 0.9
    if total / GIB < want:
        return Row("memory", FAIL, f"{detail}, expected about {acc.node_memory_gib} GiB")
    return Row("memory", PASS, f"{detail} (machine has {acc.node_memory_gib} GiB)")


def shm(required: str | None, path: str = "/dev/shm", root: Path = Path("/")) -> Row:
    """/dev/shm must exist and be at least `required` (a quantity such as 250Gi)."""
    target = _at(root, path)
    try:
        stat = os.statvfs(target)
    except OSError as err:
        return Row("shm", FAIL, f"{path}: {err.strerror}")
    size = stat.f_blocks * stat.f_frsize
    detail = f"{path} {size / GIB:.1f} GiB"
    if required is not None and size < parse_bytes(required):
        return Row("shm", FAIL, f"{detail}, run asks for {required}")
    if size < MIN_SHM:
        return Row("shm", WARN, f"{detail}, below 1 GiB")
    return Row("shm", PASS, detail)


def writable(paths: list[str], root: Path = Path("/")) -> Row:
    """Each path exists and accepts a new file."""
    bad = []
    for path in paths:
        target = _at(root, path)
        try:
            with tempfile.NamedTemporaryFile(dir=target, prefix=".preflight-") as handle:
                handle.write(b"ok")
                handle.flush()
        except OSError as err:
            bad.append(f"{path} ({err.strerror or err})")
    if bad:
        return Row("mounts-writable", FAIL, "not writable: " + ", ".join(bad))
    return Row("mounts-writable", PASS, ", ".join(paths))


def mounts(acc: Accelerator | None, root: Path = Path("/"), gpus: int | None = None) -> Row:
    """The accelerator's host mounts (those a pod on `gpus` GPUs gets) are present."""
    if acc is None:
        return Row("mounts", SKIP, NO_GPU)
    paths = [m["mount_path"] for m in _pod(acc, gpus).mounts]
    missing = [p for p in paths if not _at(root, p).exists()]
    if missing:
        return Row("mounts", FAIL, "missing: " + ", ".join(missing))
    return Row("mounts", PASS, ", ".join(paths))


def required_files(acc: Accelerator, gpus: int | None = None) -> list[tuple[str, str]]:
    """(description, path or glob) the accelerator's NCCL setup needs, from the catalog;
    a partial-node pod (NCCL sockets) needs only the driver libraries."""
    needs = [
        ("CUDA driver", f"{acc.library_path}/libcuda.so*"),
        ("NVML", f"{acc.library_path}/libnvidia-ml.so*"),
    ]
    if not _pod(acc, gpus).whole_node:
        return needs
    env = acc.nccl_env
    plugin_dir = env.get("NCCL_PLUGIN_PATH", acc.library_path)
    needs.append(("NCCL net plugin", f"{plugin_dir}/libnccl-net*.so*"))
    if "NCCL_TUNER_PLUGIN" in env:
        needs.append(("NCCL tuner plugin", f"{acc.library_path}/{env['NCCL_TUNER_PLUGIN']}"))
    for key, value in sorted(env.items()):
        if value.startswith("/") and key != "NCCL_PLUGIN_PATH":
            needs.append((key, value))
    return needs


def libraries(acc: Accelerator | None, root: Path = Path("/"), gpus: int | None = None) -> Row:
    if acc is None:
        return Row("libraries", SKIP, NO_GPU)
    missing = []
    needs = required_files(acc, gpus)
    for what, pattern in needs:
        path = Path(pattern)
        if not any(_at(root, str(path.parent)).glob(path.name)):
            missing.append(f"{what} ({pattern})")
    if missing:
        return Row("libraries", FAIL, "missing: " + "; ".join(missing))
    return Row("libraries", PASS, f"{len(needs)} files present")


def nccl_env(acc: Accelerator | None, environ: Mapping[str, str], gpus: int | None = None) -> Row:
    """The container's NCCL environment equals the catalog's (sockets on a partial node)."""
    if acc is None:
        return Row("nccl-env", SKIP, NO_GPU)
    want = expected_nccl_env(acc, gpus)
    wrong = [
        f"{k}={environ.get(k, '<unset>')} (want {v})"
        for k, v in sorted(want.items())
        if environ.get(k) != v
    ]
    if wrong:
        return Row("nccl-env", FAIL, "; ".join(wrong))
    return Row("nccl-env", PASS, f"{len(want)} variables as in the catalog")


def nics(acc: Accelerator | None, root: Path = Path("/"), gpus: int | None = None) -> Row:
    """Every interface of the pod's network annotation exists; GPU NICs have the catalog MTU.
    A partial-node pod has the default network only."""
    if acc is None:
        return Row("nics", SKIP, NO_GPU)
    if not _pod(acc, gpus).whole_node:
        if not _at(root, "/sys/class/net/eth0").is_dir():
            return Row("nics", FAIL, "eth0 (default) missing")
        return Row("nics", PASS, "default network only (a partial node)")
    problems = []
    for entry in acc.network.interfaces():
        name = entry["interfaceName"]
        folder = _at(root, f"/sys/class/net/{name}")
        if not folder.is_dir():
            problems.append(f"{name} ({entry['network']}) missing")
            continue
        if entry["network"] != "default":
            mtu = int((folder / "mtu").read_text().strip() or 0)
            if mtu != acc.network.mtu:
                problems.append(f"{name} MTU {mtu} (want {acc.network.mtu})")
    if acc.network.transport == "rdma":
        want = sum(mode == "RDMA" for mode in acc.network.device_mode.values())
        folder = _at(root, "/sys/class/infiniband")
        have = len(list(folder.iterdir())) if folder.is_dir() else 0
        if have < want:
            problems.append(f"{have} RDMA devices (want {want})")
    if problems:
        return Row("nics", FAIL, "; ".join(problems))
    count = len(acc.network.networks)
    return Row("nics", PASS, f"{count} GPU networks, MTU {acc.network.mtu}")
