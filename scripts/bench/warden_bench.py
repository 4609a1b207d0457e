"""Warden benchmark: fault-to-cordon latency and node workflows per second on the dev server.

    .venv/bin/python scripts/bench/warden_bench.py [--nodes 1250] [--faults 8] [--workflows 120]

1. Latency: a worker, the periodic sweep and the node watch (warden.watch) run against a
   fake fleet of `--nodes` nodes; a definite fault is reported on a node (the GpuXidError
   condition node-problem-detector sets on an `NVRM: Xid 79` kernel line), and the time
   until the cordon activity has completed is measured, `--faults` times, at random points
   of the sweep period (`--sweep-period`). Goal: <= 1 s median, <= 2 s worst. The peer
   measured in the same run is the same with the sweep alone (no watch); the ratio is
   printed, and the worst against GKE node auto-repair's ~10 minutes (goal <= 1%), and the
   median against the same detection + cordon as direct function calls (no Temporal),
   which shows what durability costs.
2. Throughput: `--workflows` node workflows (full repair: cordon, inspect, reboot, diag Job,
   uncordon) started at once; completed workflows per second, against the same activity
   sequence run directly on 32 threads.
3. Under faults: the same repairs with faults injected on every node (two 503s reading the
   node, a node patch that acts but loses its answer, a 503 on the reset), against the
   fault-free rate of step 2: what bounded retries with backoff cost; and a check that each
   node was still cordoned and rebooted once.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import statistics
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from temporalio.client import Client  # noqa: E402

from catalog import labels  # noqa: E402
from warden.activities import Settings, WardenActivities  # noqa: E402
from warden.devserver import DevServer  # noqa: E402
from warden.fakefleet import FakeCluster  # noqa: E402
from warden.model import (  # noqa: E402
    DEFINITE,
    DetectInput,
    JobInput,
    NodeAction,
    NodeInput,
    Timings,
    node_workflow_id,
)
from warden.rules import RuleConfig  # noqa: E402
from warden.watch import NodeWatch  # noqa: E402
from warden.worker import build_worker, start_sweep  # noqa: E402
from warden.workflows import NodeWorkflow  # noqa: E402

GKE_AUTO_REPAIR_S = 600.0
GOAL_S = 6.0
WATCH_GOAL_S = (1.0, 2.0)  # median, worst


class StampSink:
    """Telemetry sink that notes when each node's cordon record was written."""

    def __init__(self):
        self.cordoned: dict[str, float] = {}

    def write(self, rec) -> None:
        if rec.action == "cordon":
            self.cordoned.setdefault(rec.node, time.monotonic())


def settings() -> Settings:
    return Settings("ultra-usc1", "reve-train-ultra", check_image="runner:bench", diag_image="dcgm")


def fleet_of(nodes: int, busy: bool) -> FakeCluster:
    fleet = FakeCluster.create(
        nodes=nodes, reboot_s=0.2, job_s=0.1, prefix=f"b{uuid.uuid4().hex[:5]}"
    )
    if busy:  # a long job on every node: the node workflow cordons and stops (busy)
        for i in range(nodes):
            node = fleet.node_name(i)
            fleet.add_pod(f"p{i}", "research", node, priority=labels.PRIORITY_HIGH, run=f"r{i}")
    return fleet


async def latency(address: str, nodes: int, faults: int, t: Timings, watch: bool) -> list[float]:
    """Seconds from a definite fault reported on a node (node-problem-detector's GpuXidError
    condition, XID 79) to its cordon: with the node watch beside the sweep (as deployed),
    or with the sweep alone (the peer)."""
    fleet, sink = fleet_of(nodes, busy=True), StampSink()
    acts = WardenActivities(fleet.kube, fleet.gcp, fleet.prom, sink, settings())
    client = await Client.connect(address)
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    found, stop = [], asyncio.Event()
    async with build_worker(client, queue, acts, t):
        sweep = await start_sweep(client, f"bench-{queue}", queue, t)
        watching = None
        if watch:
            node_watch = NodeWatch(fleet.kube, client, queue, t, RuleConfig())
            watching = asyncio.create_task(node_watch.run(stop))
        await asyncio.sleep(2 * t.sweep_period_s)
        rng = random.Random(7)
        for k in range(faults):
            node = fleet.node_name(k * 7 % nodes)
            await asyncio.sleep(rng.uniform(0, t.sweep_period_s))  # a random point of the period
            injected = time.monotonic()
            fleet.set_condition(node, "GpuXidError", "Xid79")
            while node not in sink.cordoned:
                await asyncio.sleep(0.01)
            found.append(sink.cordoned[node] - injected)
        stop.set()
        if watching is not None:
            await watching
    await sweep.terminate()  # after the worker stopped: no workflow task is in flight
    return found


def direct_latency(nodes: int) -> float:
    """The peer: one detection pass and the cordon as plain calls."""
    fleet, sink = fleet_of(nodes, busy=True), StampSink()
    acts = WardenActivities(fleet.kube, fleet.gcp, fleet.prom, sink, settings())
    fleet.set_metrics(fleet.node_name(0), xids=[79])
    started = time.monotonic()
    for finding in acts.detect(DetectInput(0)).findings:
        acts.cordon(NodeAction(finding.node, "direct", finding.reason))
    return time.monotonic() - started


def inject_faults(fleet: FakeCluster, count: int) -> None:
    for i in range(count):
        node = fleet.node_name(i)
        fleet.inject("kube", "get_node", 503, times=2, key=node)
        fleet.inject("kube", "patch_node", "timeout", key=node, after=True)
        fleet.inject("gcp", "reset", 503, key=node)


async def throughput(address: str, count: int, t: Timings, faults: bool = False):
    """Completed full repairs per second, and whether each node was acted on once."""
    fleet = fleet_of(count, busy=False)
    if faults:
        inject_faults(fleet, count)
    acts = WardenActivities(fleet.kube, fleet.gcp, fleet.prom, StampSink(), settings())
    client = await Client.connect(address)
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, queue, acts, t):
        started = time.monotonic()
        handles = await asyncio.gather(
            *(
                client.start_workflow(
                    NodeWorkflow.run,
                    NodeInput(fleet.node_name(i), "respond", t, DEFINITE, "XID 79"),
                    id=node_workflow_id(fleet.node_name(i)),
                    task_queue=queue,
                    task_timeout=timedelta(seconds=t.workflow_task_timeout_s),
                )
                for i in range(count)
            )
        )
        results = await asyncio.gather(*(h.result() for h in handles))
        elapsed = time.monotonic() - started
    assert all(r.outcome == "uncordoned" for r in results), "a repair did not finish"
    once = all(set(fleet.counts(k).values()) == {1} for k in ("cordon", "reboot", "uncordon"))
    return count / elapsed, once


def direct_throughput(count: int) -> float:
    """The peer: the same activity sequence per node, called directly on 32 threads."""
    fleet = fleet_of(count, busy=False)
    acts = WardenActivities(fleet.kube, fleet.gcp, fleet.prom, StampSink(), settings())

    def repair(i: int) -> None:
        node, rid = fleet.node_name(i), f"direct-{i}"
        acts.cordon(NodeAction(node, rid, "XID 79"))
        acts.inspect(NodeAction(node, rid))
        acts.reboot(NodeAction(node, rid))
        while not acts.boot_state(NodeAction(node, rid)).ready:
            time.sleep(0.05)
        ref = acts.start_job(JobInput(node, rid, "diag", 3))
        while acts.job_status(ref).state == "running":
            time.sleep(0.05)
        acts.uncordon(NodeAction(node, rid))

    started = time.monotonic()
    with ThreadPoolExecutor(32) as pool:
        list(pool.map(repair, range(count)))
    return count / (time.monotonic() - started)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1250)
    parser.add_argument("--faults", type=int, default=8)
    parser.add_argument("--workflows", type=int, default=120)
    parser.add_argument("--sweep-period", type=float, default=Timings().sweep_period_s)
    args = parser.parse_args(argv)
    logging.getLogger("temporalio.activity").setLevel(logging.ERROR)  # the injected faults
    t = Timings(
        activity_timeout_s=30,
        retry_initial_s=0.2,
        poll_s=0.1,
        busy_recheck_s=1.0,
        sweep_period_s=args.sweep_period,
    )
    with DevServer() as server:
        found = asyncio.run(latency(server.address, args.nodes, args.faults, t, watch=True))
        swept = asyncio.run(latency(server.address, args.nodes, args.faults, t, watch=False))
        peer = direct_latency(args.nodes)
        rate, _ = asyncio.run(throughput(server.address, args.workflows, t))
        peer_rate = direct_throughput(args.workflows)
        faulty_rate, once = asyncio.run(throughput(server.address, args.workflows, t, True))
    median, worst = statistics.median(found), max(found)
    swept_median, swept_worst = statistics.median(swept), max(swept)
    met = median <= WATCH_GOAL_S[0] and worst <= WATCH_GOAL_S[1]
    print(f"fault -> cordon, {args.nodes} nodes, a GpuXidError condition (XID 79) on a node:")
    print(f"  watch + sweep every {args.sweep_period:g}s: median {median:.2f}s  max {worst:.2f}s  "
          f"over {len(found)} faults  (goal <= {WATCH_GOAL_S[0]:g}s median, "
          f"<= {WATCH_GOAL_S[1]:g}s max: {'MET' if met else 'MISSED'})")  # fmt: skip
    print(f"  vs sweep only (the peer): median {swept_median:.2f}s  max {swept_worst:.2f}s: "
          f"ratio {median / swept_median:.2f} median, {worst / swept_worst:.2f} max")  # fmt: skip
    print(f"  vs GKE auto-repair ~{GKE_AUTO_REPAIR_S:.0f}s: ratio {median / GKE_AUTO_REPAIR_S:.4f} "
          f"median, {worst / GKE_AUTO_REPAIR_S:.4f} max (goal <= 1%, <= {GOAL_S:g}s, "
          f"max: {'MET' if worst <= GOAL_S else 'MISSED'})")  # fmt: skip
    print(f"  vs direct detection + cordon (no Temporal) {peer:.3f}s: ratio {median / peer:.1f}x")
    print(f"node workflows (full repair), {args.workflows} at once: {rate:.1f}/s")
    print(f"  vs the same activities called directly on 32 threads {peer_rate:.1f}/s: "
          f"ratio {rate / peer_rate:.2f}")  # fmt: skip
    print(f"the same under faults (2x 503 reading the node, a lost patch answer, a 503 reset, "
          f"per node): {faulty_rate:.1f}/s")  # fmt: skip
    print(f"  vs fault-free {rate:.1f}/s: ratio {faulty_rate / rate:.2f}; "
          f"every node cordoned, rebooted, uncordoned once: {once}")  # fmt: skip


if __name__ == "__main__":
    main()
