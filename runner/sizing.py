"""Pod sizing: the GPUs, CPUs, memory and /dev/shm of each pod and the Ray head's requests.

Pure functions used by `runner.resolve` once it knows the accelerator (or that the run is
CPU only). A GPU pod's defaults scale with its share of the node's GPUs (the node's
allocatable CPU and memory, the accelerator's `default_shm`, whole GiB, shm at most half the
memory); a CPU pod's are the `CPU_ONLY_` values. Every request must fit one node of its
pool (`runner.validation.requests.check_fits`), else one `InputError` naming the key.

    from runner.sizing import gpu_requests
    gpus, cpus, memory, shm = gpu_requests(spec, accelerator("H200"))
"""

from __future__ import annotations

from catalog.quantity import parse_bytes
from catalog.schema import Accelerator, Cluster
from runner.spec_schema import RunSpec
from runner.validation.requests import bytes_request, check_fits, cpu_request

CPU_ONLY_CPUS = 4.0
CPU_ONLY_MEMORY = 16 * 2**30
CPU_ONLY_SHM = 2**30
GIB = 2**30
POD, HEAD = ("cpus", "memory"), ("head_cpus", "head_memory")


def gpu_requests(spec: RunSpec, accel: Accelerator) -> tuple[int, float, int, int]:
    """(gpus, cpus, memory, shm) per pod on an accelerator; defaults scale with the GPUs."""
    gpus = accel.gpus_per_node if spec.gpus is None else spec.gpus
    if gpus == 0:
        raise spec.error("gpus", f"0 GPUs on {accel.name}; leave out accelerator for a CPU run")
    if gpus > accel.gpus_per_node:
        raise spec.error(
            "gpus", f"{gpus} GPUs exceed the {accel.gpus_per_node} of one {accel.name} node"
        )
    share = gpus / accel.gpus_per_node
    cpus = cpu_request(spec, "cpus")
    if cpus is None:
        cpus = float(int(accel.allocatable_cpu * share)) or 1.0
    memory = bytes_request(spec, "memory")
    if memory is None:
        memory = (int(accel.allocatable_memory_bytes * share) // GIB or 1) * GIB
    shm = bytes_request(spec, "shm")
    if shm is None:
        shm = min((int(parse_bytes(accel.default_shm) * share) // GIB or 1) * GIB, memory // 2)
    node_memory = accel.allocatable_memory_bytes
    check_fits(spec, POD, cpus, memory, accel.allocatable_cpu, node_memory, accel.name)
    return gpus, cpus, memory, shm


def cpu_requests(spec: RunSpec, cluster: Cluster) -> tuple[int, float, int, int]:
    """(0, cpus, memory, shm) per pod of a CPU run; defaults are the CPU_ONLY_ values."""
    cpus = cpu_request(spec, "cpus") or CPU_ONLY_CPUS
    memory = bytes_request(spec, "memory") or CPU_ONLY_MEMORY
    shm = bytes_request(spec, "shm") or min(CPU_ONLY_SHM, memory // 2)
    pool = cluster.cpu_pool
    node_memory = parse_bytes(pool.allocatable_memory)
    check_fits(spec, POD, cpus, memory, pool.allocatable_cpu, node_memory, "CPU")
    return 0, cpus, memory, shm


def head_requests(spec: RunSpec, cluster: Cluster) -> tuple[float, int]:
    """(cpus, memory) of the Ray head, each None when not set; they must fit a CPU node."""
    cpus, memory = cpu_request(spec, "head_cpus"), bytes_request(spec, "head_memory")
    pool = cluster.cpu_pool
    node_memory = parse_bytes(pool.allocatable_memory)
    check_fits(spec, HEAD, cpus, memory, pool.allocatable_cpu, node_memory, "CPU")
    return cpus, memory
