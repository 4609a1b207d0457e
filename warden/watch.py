"""Warden hears of a node fault when it is reported: watches on nodes and on node Events.

    watch = NodeWatch(kube, client, "warden", timings, rules)
    await watch.run(stop)            # until `stop` is set (the worker runs it beside itself)

The periodic sweep (`SweepWorkflow`) reads every node every `timings.sweep_period_s`, so a
fault waited up to a period for its cordon. The watch follows the API server instead:

- **Nodes** (`watch_nodes`): every change to a node (node-problem-detector setting a
  condition, the node going NotReady) is classified at once with the sweep's rules
  (`rules.node_finding`: conditions and readiness; DCGM figures stay the sweep's);
- **Events** (`watch_node_events`): node-problem-detector's Events on a node (`NVRM: Xid`
  kernel lines, `KernelDeadlock`, ...), which set no condition, through `rules.event_finding`.

A finding starts the node's workflow the way the sweep does (`control.node_start_options`:
its ID is the lock, so the watch, the sweep and other replicas never act twice on a node).
The watches run in threads (the adapters block), resume after the last version they saw,
start again from the whole list when it is too old (410) and back off while the API server
does not answer; the sweep stays as the safety net for anything they miss.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

from temporalio.client import Client
from temporalio.exceptions import WorkflowAlreadyStartedError

from warden import rules
from warden.control import NODE_WORKFLOW, node_start_options
from warden.errors import ApiError, NotFound
from warden.kube import Change, WardenKube
from warden.model import Finding, NodeInput, Timings

log = logging.getLogger("warden.watch")
WATCH_S = 300.0
"""One watch request's length (the API server ends it; the watch resumes)."""
BACKOFF_S = (1.0, 30.0)


class NodeWatch:
    """The two watches and the node workflows they start."""

    def __init__(self, kube: WardenKube, client: Client, task_queue: str, timings: Timings,
                 rule_config: rules.RuleConfig, watch_s: float = WATCH_S):  # fmt: skip
        self.kube, self.client, self.task_queue = kube, client, task_queue
        self.timings, self.rules, self.watch_s = timings, rule_config, watch_s
        self.counts: Counter[str] = Counter()
        """started, already_running, failed, watch_errors."""
        self._starting: set[str] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = threading.Event()

    async def run(self, stop: asyncio.Event) -> None:
        """Follow nodes and node Events until `stop` is set."""
        self._loop = asyncio.get_running_loop()
        threads = [
            threading.Thread(target=self._follow, args=(self._nodes,), name="watch-nodes",
                             daemon=True),
            threading.Thread(target=self._follow, args=(self._events,), name="watch-events",
                             daemon=True),
        ]  # fmt: skip
        for thread in threads:
            thread.start()
        try:
            await stop.wait()
        finally:
            self._stop.set()  # the threads end with their current watch request

    def _follow(self, one_watch: Callable[[str | None], str | None]) -> None:
        """Run `one_watch(version)` again and again, resuming where it ended; after an
        error, back off (doubling up to BACKOFF_S[1])."""
        version, backoff = None, BACKOFF_S[0]
        while not self._stop.is_set():
            try:
                version = one_watch(version)
                backoff = BACKOFF_S[0]
            except NotFound:  # 410: too old to resume from, start again
                version = None
            except ApiError as err:
                self.counts["watch_errors"] += 1
                log.warning("watch: %s; again in %.0f s", err, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, BACKOFF_S[1])

    def _nodes(self, version: str | None) -> str | None:
        return self._consume(self.kube.watch_nodes(version or "0", self.watch_s), self._node)

    def _events(self, version: str | None) -> str | None:
        # from the start: the Events the API server holds (those older than
        # rules.EVENT_MAX_AGE_S are history), so an outage of the watch loses none newer
        changes = self.kube.watch_node_events(version or "0", self.watch_s)
        return self._consume(changes, self._event)

    def _consume(self, changes: Iterator[Change], handle: Callable) -> str | None:
        version = None
        for kind, obj in changes:
            version = obj.get("metadata", {}).get("resourceVersion") or version
            if kind in ("ADDED", "MODIFIED"):
                handle(obj)
            if self._stop.is_set():
                break
        return version

    def _node(self, node: dict) -> None:
        finding = rules.node_finding(node, self.rules, datetime.now(UTC))
        if finding is not None:
            self._start(finding)

    def _event(self, event: dict) -> None:
        finding = rules.event_finding(event, datetime.now(UTC))
        if finding is None or finding.node in self._starting:
            return
        try:  # a node already cordoned (or gone) is not the watch's
            node = self.kube.get_node(finding.node)
        except ApiError:
            return
        if rules.is_gpu_node(node) and not node.get("spec", {}).get("unschedulable"):
            self._start(finding)

    def _start(self, finding: Finding) -> None:
        """Start the node's workflow on the event loop (one start in flight per node)."""
        if finding.node in self._starting or self._loop is None:
            return
        self._starting.add(finding.node)
        started = time.monotonic()
        future = asyncio.run_coroutine_threadsafe(self._start_workflow(finding), self._loop)
        future.add_done_callback(lambda f: self._started(finding, f, started))

    async def _start_workflow(self, finding: Finding) -> bool:
        inp = NodeInput(finding.node, "respond", self.timings, finding.severity, finding.reason)
        options = node_start_options(finding.node, self.task_queue, self.timings)
        try:
            await self.client.start_workflow(NODE_WORKFLOW, inp, **options)
        except WorkflowAlreadyStartedError:
            return False
        return True

    def _started(self, finding: Finding, future, since: float) -> None:
        self._starting.discard(finding.node)
        if future.cancelled() or future.exception() is not None:
            self.counts["failed"] += 1
            log.warning("watch: no workflow for %s: %s", finding.node, future.exception())
        elif future.result():
            self.counts["started"] += 1
            log.info("watch: %s %s: %s (%.3f s)", finding.node, finding.severity,
                     finding.reason, time.monotonic() - since)  # fmt: skip
        else:
            self.counts["already_running"] += 1
