"""A rendered run's cluster at a scaled-down shape, on this machine: `runner run --local
RUN.yaml --shape NODESxGPUS` runs

    python -m driver.embedded.cluster CONFIG.yaml [key=value ...] shape.nodes=2 \
        shape.gpus_per_node=2 shape.accelerator=cpu shape.cpus_per_gpu=1

which starts a Ray cluster of several nodes here (`ray.cluster_utils.Cluster`: a head node
with no CPUs for work, as the RayJob's head has `num-cpus: 0`, and one raylet per node with
a node id of its own and `gpus_per_node` GPUs, which CPU workers stand in for) and then the
driver, joined to it through `RAY_ADDRESS`: the driver's path in a cluster (the channel on
the node's address, the checkpoint key from the environment: this user's local key), with
the composed configuration of the rendered RayJob at the smaller shape. Nothing differs
from a cluster but the device (CPU workers, gloo). The cluster and the driver run in a
child in a session and a network namespace of their own (driver/embedded/supervise.py):
nothing outlives it or listens outside it. Exit codes are the driver's.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

from catalog.errors import InputError

USAGE = ("usage: python -m driver.embedded.cluster CONFIG.yaml [key=value ...] "
         "shape.nodes=N shape.gpus_per_node=G")  # fmt: skip
HEAD = {"num_cpus": 0, "include_dashboard": False}
"""The head node: the driver's, with no CPUs for work (the rendered head's `num-cpus: 0`).
Without the dashboard the rendered head has: there it takes the RayJob's submission, here
the driver is started directly, in a network namespace where no browser would reach the
dashboard, and nothing of the driver's path asks it (Ray Train's controller runs in the
driver, so no placement-group cleaner asks Ray's state API: driver/raytrain/lean.py). Its
processes took about 3 s of CPU while the nodes and the workers started."""
SPARE_CPUS = 16
"""Logical CPUs a node has beyond its workers' (services and actors request some)."""
NO_PRESTART = {"RAY_prestart_worker_first_driver": "0", "RAY_enable_worker_prestart": "0"}
"""No idle worker processes started ahead (one per logical CPU, on every node)."""


def shape_of(args: list[str]) -> tuple[int, int, float]:
    """(nodes, GPUs per node, CPUs per GPU) from the `shape.*` overrides."""
    words = dict(word.split("=", 1) for word in args if word.startswith("shape.") and "=" in word)
    try:
        nodes, gpus = int(words["shape.nodes"]), int(words["shape.gpus_per_node"])
        cpus = float(words.get("shape.cpus_per_gpu", "1"))
    except (KeyError, ValueError):
        message = "needs shape.nodes and shape.gpus_per_node"
        raise InputError("command line", "shape", message) from None
    if nodes < 1 or gpus < 1:
        raise InputError("command line", "shape", "nodes and GPUs per node must be at least 1")
    return nodes, gpus, cpus


def start(nodes: int, gpus: int, cpus_per_gpu: float):
    """The cluster: a head and `nodes` worker nodes of `gpus` stand-in GPUs each."""
    from ray.cluster_utils import Cluster

    from driver.embedded.lean import LOCAL_ENV
    from driver.embedded.ray_start import short_raylet_wait

    for key, value in {**LOCAL_ENV, **NO_PRESTART}.items():
        os.environ.setdefault(key, value)
    # Ray's folder of its own: a tool that looks for "the" local Ray (`address="auto"`, Ray's
    # state API) finds this one, not another on the machine.
    os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="ray-shape-")
    with short_raylet_wait():  # each node's wait for its raylet, in short steps
        cluster = Cluster(initialize_head=True, head_node_args=HEAD)
        for index in range(nodes):
            cluster.add_node(num_cpus=int(gpus * cpus_per_gpu) + SPARE_CPUS, num_gpus=gpus,
                             resources={f"shape_node_{index}": 1},
                             include_dashboard=False)  # fmt: skip
    cluster.wait_for_nodes()
    return cluster


def free_port() -> int:
    """A TCP port free on this machine now."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run(args: list[str]) -> int:
    """The cluster, then the driver joined to it; the driver's exit code."""
    from driver import train
    from driver.checkpoint.auth import KEY_ENV, load_secret
    from driver.launch import PRELOAD, preload

    try:
        nodes, gpus, cpus = shape_of(args)
    except InputError as err:
        print(f"error: {err.line()}", file=sys.stderr)
        return 2
    os.environ.setdefault(KEY_ENV, load_secret().decode())  # this user's local key
    if not any(word.startswith("logging.format=") for word in args):
        args = [*args, "logging.format=progress"]  # a terminal, not a cluster's log
    loading = preload(PRELOAD)  # the trainer's modules, while the nodes start
    try:
        cluster = start(nodes, gpus, cpus)
    finally:
        loading.join()  # before the driver imports anything (driver.launch.preload)
    os.environ["RAY_ADDRESS"] = cluster.address
    try:
        return train.main(args)
    finally:
        stop(cluster)


def stop(cluster) -> None:
    """End what `start` started: this process's connection first (the head goes last),
    the nodes, then Ray's folder of its own."""
    import ray

    ray.shutdown()
    cluster.shutdown()
    shutil.rmtree(os.environ.get("RAY_TMPDIR", ""), ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    from driver.embedded.supervise import supervise

    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr if not args else sys.stdout)
        return 2 if not args else 0
    return supervise(lambda: run(args), isolate_network=True)


if __name__ == "__main__":
    sys.exit(main())
