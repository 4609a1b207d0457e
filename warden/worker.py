"""The Warden worker: workflows and activities on one task queue, plus the periodic loops.

    python -m warden.worker --config warden/local.yaml --fake /tmp/fleet.json

(same as `warden worker ...`). `build_worker` is what tests use with their own client and
adapters; `run` connects to the configured Temporal server, builds the real (or, with
`fake`, the on-disk fake) adapters, (re)starts the sweep, grow, kept-nodes and (with
`stragglers` configured) straggler workflows and serves until SIGTERM.
"""

from __future__ import annotations

import asyncio
import signal
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.worker import Worker

from warden.activities import Settings, WardenActivities
from warden.config import WardenConfig
from warden.faults import FaultInterceptor
from warden.model import (
    GrowInput,
    KeepInput,
    StragglerInput,
    SweepInput,
    Timings,
    grow_workflow_id,
    keep_workflow_id,
    straggler_workflow_id,
)
from warden.report import connect
from warden.starters import request_shrink  # noqa: F401  (re-exported: tests, callers)
from warden.stragglers import StragglerSweep, server_source
from warden.telemetry import ClickHouseSink, JsonlSink, TeeSink
from warden.workflows import (
    GrowWorkflow,
    KeepWorkflow,
    NodeWorkflow,
    ShrinkWorkflow,
    StragglerWorkflow,
    StressTestWorkflow,
    SweepWorkflow,
)

ACTIVITY_THREADS = 32
WORKFLOWS = [NodeWorkflow, StressTestWorkflow, SweepWorkflow, ShrinkWorkflow, GrowWorkflow,
             KeepWorkflow, StragglerWorkflow]  # fmt: skip


def activity_functions(acts: WardenActivities) -> list:
    return [
        acts.cordon, acts.uncordon, acts.start_job, acts.job_status, acts.inspect, acts.notify,
        acts.drain, acts.reboot, acts.boot_state, acts.escalate, acts.record, acts.detect,
        acts.dispatch, acts.shrink, acts.grow, acts.keep_nodes, acts.report_failure,
        acts.sweep_stragglers,
    ]  # fmt: skip


def build_worker(
    client: Client, task_queue: str, acts: WardenActivities, timings: Timings | None = None
) -> Worker:
    t = timings or Timings()
    return Worker(
        client,
        task_queue=task_queue,
        workflows=WORKFLOWS,
        activities=activity_functions(acts),
        activity_executor=ThreadPoolExecutor(ACTIVITY_THREADS),
        max_concurrent_activities=ACTIVITY_THREADS,
        interceptors=[FaultInterceptor()],
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=t.workflow_task_timeout_s),
        graceful_shutdown_timeout=timedelta(seconds=t.activity_timeout_s),
    )


def sweep_workflow_id(cluster: str) -> str:
    return f"warden-sweep-{cluster}"


async def start_sweep(client: Client, cluster: str, task_queue: str, t: Timings, sweeps=0):
    """Start the periodic sweep (one per cluster), replacing a running one: the sweep holds
    no state of its own, and a worker started with new settings brings them to it."""
    inp = SweepInput(t, task_queue, sweeps)
    return await _replace(client, SweepWorkflow.run, inp, sweep_workflow_id(cluster), task_queue)


async def start_keep(client: Client, cluster: str, task_queue: str, t: Timings, rounds=0):
    """Start the kept-nodes rounds (one per cluster), replacing a running one: like the
    sweep, its state lives on the nodes."""
    inp = KeepInput(t, rounds)
    return await _replace(client, KeepWorkflow.run, inp, keep_workflow_id(cluster), task_queue)


async def start_grow(client: Client, cluster: str, task_queue: str, t: Timings, rounds=0):
    """Start the grow rounds (one per cluster), replacing a running one: what a worker group
    had before Warden shrank it lives on the RayCluster."""
    inp = GrowInput(t, rounds)
    return await _replace(client, GrowWorkflow.run, inp, grow_workflow_id(cluster), task_queue)


async def start_stragglers(client: Client, cluster: str, task_queue: str, t: Timings, rounds=0):
    """Start the straggler sweep (one per cluster), replacing a running one: its findings
    live in ClickHouse, its locks are the node workflows' IDs."""
    inp = StragglerInput(t, task_queue, rounds)
    wid = straggler_workflow_id(cluster)
    return await _replace(client, StragglerWorkflow.run, inp, wid, task_queue)


async def _replace(client: Client, run, inp, workflow_id: str, task_queue: str):
    """Start a periodic workflow under its per-cluster ID, terminating one already running."""
    return await client.start_workflow(
        run,
        inp,
        id=workflow_id,
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.TERMINATE_EXISTING,
        task_timeout=timedelta(seconds=inp.timings.workflow_task_timeout_s),
    )


def straggler_sweep(config: WardenConfig) -> StragglerSweep | None:
    """The straggler sweep's ClickHouse source and settings, if configured."""
    s = config.stragglers
    if s is None:
        return None
    timeout_s = min(s.timeout_s, config.timings.activity_timeout_s)  # within its heartbeat
    source = server_source(s.clickhouse_url, s.user, s.password_env, timeout_s)
    return StragglerSweep(source, s.lookback_s, s.thresholds, s.max_runs)


def activities_for(config: WardenConfig, fake: str | None = None) -> WardenActivities:
    """Activities with the real adapters, or with the on-disk fake cluster at `fake`."""
    from catalog import load_cluster

    cluster = load_cluster(config.cluster)
    settings = Settings(
        cluster=cluster.name,
        project=config.project or cluster.project,
        job_namespace=config.jobs.namespace,
        check_image=config.jobs.check_image,
        diag_image=config.jobs.diag_image,
        job_deadline_s=int(config.timings.check_timeout_s),
        escalate_window_s=config.timings.escalate_window_s,
        rules=config.rules,
    )
    sink = TeeSink(
        JsonlSink(config.telemetry_path) if config.telemetry_path else None,
        ClickHouseSink(config.clickhouse_url) if config.clickhouse_url else None,
    )
    if fake:
        from warden.fakefleet import FakeCluster

        fleet = FakeCluster(fake)
        return WardenActivities(fleet.kube, fleet.gcp, fleet.prom, sink, settings,
                                straggler_sweep(config))  # fmt: skip
    from warden.gcp import RealGcp
    from warden.kube_rest import RealKube
    from warden.prom import HttpPrometheus

    t = config.timings  # every request gives up after this, never outliving its attempt
    timeout_s = min(t.request_timeout_s, t.activity_timeout_s)
    prom = None
    if config.prometheus:
        p = config.prometheus
        prom = HttpPrometheus(p.url, p.node_label, p.window, timeout_s)
    location = config.location or cluster.region
    gcp = RealGcp(location, cluster.name, config.repair, timeout_s=timeout_s)
    kube = RealKube(timeout_s=timeout_s)
    return WardenActivities(kube, gcp, prom, sink, settings, straggler_sweep(config))


async def serve_until_signalled(worker: Worker, gateway=None, watch=None) -> None:
    """Run the worker (and the gateway's HTTP server and the node watch, if any) until
    SIGTERM (Kubernetes stopping the pod) or SIGINT, then stop polling and let running
    activities finish (up to the graceful shutdown timeout)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    watching = asyncio.create_task(watch.run(stop)) if watch is not None else None
    try:
        async with worker:
            await stop.wait()
    finally:
        if watching is not None:
            await watching
        if gateway is not None:
            gateway.shutdown()


def start_gateway(config: WardenConfig, client: Client, acts: WardenActivities, runtime):
    """The gateway's HTTP server (warden.gateway) when `gateway.address` is set, else None."""
    if config.gateway is None:
        return None
    from warden.gateway import Gateway

    g = config.gateway
    meter = runtime.metric_meter if runtime is not None else None
    gateway = Gateway(acts.kube, client, config.temporal.task_queue, asyncio.get_running_loop(),
                      audience=g.audience, service_accounts=frozenset(g.service_accounts),
                      wait_s=g.wait_s, timings=config.timings, rules=config.rules,
                      meter=meter)  # fmt: skip
    return gateway.serve(g.address)


async def run(config: WardenConfig, fake: str | None = None, sweep: bool = True) -> None:
    """Serve until signalled: the worker, the gateway (if configured), the node watch
    (`watch`, warden.watch), and (once per cluster) the periodic sweep, the grow and
    kept-nodes rounds and the straggler sweep (if configured)."""
    runtime = None
    if config.metrics_address:
        from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

        metrics = PrometheusConfig(bind_address=config.metrics_address)
        runtime = Runtime(telemetry=TelemetryConfig(metrics=metrics))
    client = await connect(config.temporal.address, config.temporal.namespace, runtime)
    queue = config.temporal.task_queue
    acts = activities_for(config, fake)
    worker = build_worker(client, queue, acts, config.timings)
    if sweep:
        await start_sweep(client, config.cluster, queue, config.timings)
        await start_keep(client, config.cluster, queue, config.timings)
        await start_grow(client, config.cluster, queue, config.timings)
        if config.stragglers is not None:
            await start_stragglers(client, config.cluster, queue, config.timings)
    watch = None
    if config.watch:
        from warden.watch import NodeWatch

        watch = NodeWatch(acts.kube, client, queue, config.timings, config.rules)
    await serve_until_signalled(worker, start_gateway(config, client, acts, runtime), watch)


def main(argv: list[str] | None = None) -> None:
    from warden.cli import main as cli_main

    cli_main(["worker", *(argv or [])])


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
