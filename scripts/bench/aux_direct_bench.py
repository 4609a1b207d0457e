"""The auxiliary calls of a composed run, each printed as a ratio against its peer measured in
the same run, on a simulated cluster of this machine (driver.embedded.cluster).

    python scripts/bench/aux_direct_bench.py         # the auxiliary calls (~2-4 min)
    python scripts/bench/aux_direct_bench.py --calls 300 --rounds 1   # quicker

Auxiliary calls across the simulated nodes (`aux_figures`), on `cluster.start(2, 2, 1.0)`:
an echo service (scripts/bench/aux_rpc_bench.py's handler) started by the coordinator's own
`start_service`, one worker on each node (STRICT_SPREAD) and one proxy per node; a caller
actor on node 0 stands for a training rank there, and every figure is taken from it, in
`--rounds` rounds with the sides taking turns (load that drifts hits all alike), `--calls`
sequential 1 KiB round trips per side and round:

- same node: the rank's client as `AuxSession` builds it from the coordinator's spec
  (node 0's worker called directly, no proxy), ÷ a Ray actor call (`ray.get` of an echo
  actor's method on node 0): goal <= 0.25;
- cross node: a client through node 1's proxy to node 1's worker, ÷ a bare ZeroMQ chain
  through the same two processes (a DEALER here, a ROUTER -> ROUTER forwarder thread in the
  proxy actor's process, a ROUTER echo thread in the worker actor's process; no checks, no
  state): goal <= 1.3.

For scale it also prints a same-node call through node 0's own proxy (the hop the direct
path skips) and a Ray actor call to node 1.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from types import SimpleNamespace

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from scripts.bench import aux_rpc_bench as rpc  # noqa: E402

SIDES = ("direct", "ray_here", "cross", "bare", "own_proxy", "ray_there")
LABELS = {
    "direct": "same node, direct      ",
    "ray_here": "Ray actor, same node   ",
    "cross": "cross node, its proxy  ",
    "bare": "bare ZeroMQ chain      ",
    "own_proxy": "same node, its proxy   ",
    "ray_there": "Ray actor, other node  ",
}


class Caller:
    """Actor body on node 0: a training rank's clients, and the peers' callers; each
    method returns `calls` round-trip times (seconds) of one side."""

    def __init__(self, spec: dict, proxies: dict, bare: str, echoes: dict):
        from driver.aux.client import AuxClient
        from driver.aux.session import AuxSession

        cfg = SimpleNamespace(aux=SimpleNamespace(fleet_interval_s=2.0))
        self.session = AuxSession(cfg, spec, rank=0)  # where: asked of Ray, as a rank does
        self.clients = {
            "direct": self.session.clients["echo"],
            "cross": AuxClient("echo", 0, {proxies["there"]: 1}, deadline_s=60),
            "own_proxy": AuxClient("echo", 0, {proxies["here"]: 1}, deadline_s=60),
        }
        self.bare, self.echoes = bare, echoes
        self.small = {"x": np.random.default_rng(0).bytes(1024)}

    def links(self) -> dict:
        """The rank's links to the service: {address: (direct?, weight)}."""
        stats = self.clients["direct"].stats()["proxies"]
        return {address: (link["direct"], link["weight"]) for address, link in stats.items()}

    def measure(self, side: str, calls: int) -> list[float]:
        import ray

        if side == "bare":
            return rpc.floor(self.bare, SimpleNamespace(calls=calls), self.small)
        if side.startswith("ray"):
            echo = self.echoes[side].echo
            call = lambda: ray.get(echo.remote(self.small))  # noqa: E731
        else:
            client = self.clients[side]
            call = lambda: client.call("echo", self.small)  # noqa: E731
        rpc.timed(call, max(1, calls // 5))  # warm-up
        return rpc.timed(call, calls)


class RayEcho:
    """Actor body: the Ray side's echo."""

    def echo(self, payload):
        return payload


def echo_service(ray, nodes: int):
    """The coordinator's own start-up of an echo service, one worker per node: its
    runtime, the spec a rank gets, and the IPC root of its sockets."""
    from driver.aux.actors import start_service
    from driver.aux.coordinator import AuxRuntime, ipc_root, service_plan
    from driver.config.schema import AuxServiceConfig

    svc = AuxServiceConfig(handler="scripts.bench.aux_rpc_bench:Echo", gpus_per_worker=0.0,
                           min_replicas=nodes, placement="STRICT_SPREAD")  # fmt: skip
    layout = service_plan("echo", svc, nodes, True, True)
    runtime, root = AuxRuntime(), ipc_root()
    start_service("echo", svc, layout, root, runtime)
    cfg = SimpleNamespace(aux=SimpleNamespace(services={"echo": svc}))
    return runtime, runtime.spec(cfg), root


def place(ray, actor, node: str, *args):
    """`actor` (a class) as a 0-CPU actor pinned to `node`."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    strategy = NodeAffinitySchedulingStrategy(node_id=node, soft=False)
    return ray.remote(actor).options(num_cpus=0, scheduling_strategy=strategy).remote(*args)


def bare_chain(ray, rt, there: str, root: str) -> str:
    """The bare chain's threads in node `there`'s worker and proxy processes; its address."""
    (worker,) = [w for w, node in zip(rt.workers, worker_nodes(ray, rt), strict=True)
                 if node == there]  # fmt: skip
    echo = ray.get(worker.__ray_call__.remote(lambda _, a: rpc.bare_worker(a),
                                              f"ipc://{root}/bare-echo.sock"))  # fmt: skip
    host = next(a for a, n in rt.nodes.items() if n == there).split("//")[1].rsplit(":", 1)[0]
    proxy = rt.proxies[there]
    return ray.get(proxy.__ray_call__.remote(lambda _, w, h: rpc.bare_proxy(w, h), echo, host))


def worker_nodes(ray, rt) -> list[str]:
    """The node id of each of the service's workers (from where each actor runs)."""
    where = lambda _: __import__("ray").get_runtime_context().get_node_id()  # noqa: E731
    return ray.get([w.__ray_call__.remote(where) for w in rt.workers])


def rounds(caller, calls: int, count: int, ray) -> dict[str, list[float]]:
    """Every side's samples, `count` rounds, the order reversed every other round."""
    samples: dict[str, list[float]] = {side: [] for side in SIDES}
    for r in range(count):
        for side in SIDES if r % 2 == 0 else SIDES[::-1]:
            samples[side] += ray.get(caller.measure.remote(side, calls))
    return samples


def goes_direct(ray, caller, timeout_s: float = 30.0) -> None:
    """Wait until node 0's rank sends every call to its node's worker: two links (that
    worker, the other node's proxy), weighted by the live workers each pong reports, so
    both weigh 0 until their first pongs."""
    deadline = time.monotonic() + timeout_s
    while True:
        links = ray.get(caller.links.remote())
        weighted = [direct for direct, weight in links.values() if weight]
        if weighted == [True] and len(links) == 2:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"node 0's rank does not go direct after {timeout_s:.0f} s: {links}")
        time.sleep(0.1)


def aux_figures(args: argparse.Namespace) -> dict[str, float]:
    """The auxiliary-call figures on a simulated 2-node cluster; printed, and returned as
    {"same_node_vs_ray": ratio, "cross_node_vs_bare": ratio, <side>_p50_us: ...}."""
    import ray

    from driver.embedded import cluster as shape

    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    cluster = shape.start(2, 2, 1.0)
    runtime = None
    try:
        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
        runtime, spec, root = echo_service(ray, 2)
        nodes = spec["services"]["echo"]["nodes"]  # proxy address -> node
        here, there = list(nodes.values())
        proxies = {"here": next(a for a, n in nodes.items() if n == here),
                   "there": next(a for a, n in nodes.items() if n == there)}  # fmt: skip
        bare = bare_chain(ray, runtime.services["echo"], there, root)
        echoes = {"ray_here": place(ray, RayEcho, here), "ray_there": place(ray, RayEcho, there)}
        caller = place(ray, Caller, here, spec, proxies, bare, echoes)
        goes_direct(ray, caller)
        samples = rounds(caller, args.calls, args.rounds, ray)
    finally:
        if runtime is not None:
            runtime.stop()
        shape.stop(cluster)
    return report(samples)


def report(samples: dict[str, list[float]]) -> dict[str, float]:
    """Print each side's p50/p99 and the two ratios; the figures as a dict."""
    p = {side: rpc.percentiles(values) for side, values in samples.items()}
    print("aux calls on a simulated 2-node cluster (1 KiB round trips, caller on node 0)")
    for side in SIDES:
        print(f"  {LABELS[side]} p50 {p[side][0]:8.1f} us  p99 {p[side][1]:8.1f} us")
    same = rpc.ratio(p["direct"][0], p["ray_here"][0])
    cross = rpc.ratio(p["cross"][0], p["bare"][0])
    print(f"ratio same node (direct) / Ray actor call  {same:.3f} [goal <= 0.25]")
    print(f"ratio cross node / bare ZeroMQ chain        {cross:.3f} [goal <= 1.3]")
    hop = rpc.ratio(p["own_proxy"][0], p["direct"][0])
    print(f"  (the proxy hop the direct path skips: {hop:.2f} x the direct call)")
    return {"same_node_vs_ray": same, "cross_node_vs_bare": cross,
            **{f"{side}_p50_us": p[side][0] for side in SIDES}}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--calls", type=int, default=1000, help="sequential 1 KiB calls per side and round")
    add("--rounds", type=int, default=3, help="rounds of every side, taking turns")
    args = parser.parse_args(argv)
    load = os.getloadavg()
    print(f"host: {os.cpu_count()} CPUs, load average {load[0]:.1f} / {load[1]:.1f}")
    started = time.monotonic()
    aux_figures(args)
    load = os.getloadavg()
    print(f"load average at end: {load[0]:.1f} / {load[1]:.1f}, {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
