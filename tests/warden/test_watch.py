"""Warden reacts to a node fault when it is reported (warden.watch): a node condition or a
node-problem-detector Event starts the node's workflow with no sweep running; old Events,
cordoned nodes and healthy changes start nothing; a watch too old to resume (410) starts
again, and one the API server refuses backs off and comes back. The rules as tables; the
real adapter's watch request against a local server."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from warden import rules
from warden.errors import NotFound
from warden.kube_rest import RealKube
from warden.model import AMBIGUOUS, DEFINITE, Finding
from warden.watch import NodeWatch

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def event(reason: str, message: str = "", kind: str = "Node", age_s: float = 5.0,
          component: str = "kernel-monitor") -> dict:  # fmt: skip
    stamp = (NOW - timedelta(seconds=age_s)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"reason": reason, "message": message, "lastTimestamp": stamp,
            "involvedObject": {"kind": kind, "name": "gpu-1"},
            "source": {"component": component}}  # fmt: skip


XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus."


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (event("KernelOops", XID79), Finding("gpu-1", DEFINITE,
                                             ["kernel log XID 79 (GPU has fallen off the bus)"])),
        (event("GpuXidError", "Xid74"), Finding("gpu-1", AMBIGUOUS, ["kernel log XID 74"])),
        (event("KernelDeadlock", "task docker:1 blocked"),
         Finding("gpu-1", DEFINITE, ["KernelDeadlock: task docker:1 blocked"])),
        (event("FrequentKubeletRestart", "x"),
         Finding("gpu-1", AMBIGUOUS, ["FrequentKubeletRestart: x"])),
        (event("KernelOops", "NVRM: Xid (PCI:0000:3b:00): 13, graphics"), None),  # ignored XID
        (event("KernelOops", XID79, age_s=3600), None),  # history, not news
        (event("KernelOops", XID79, kind="Pod"), None),
        (event("WardenCordon", XID79, component="warden"), None),  # Warden's own
        (event("NodeReady", "kubelet is posting ready status"), None),
    ],
)  # fmt: skip
def test_event_finding(given, expected):
    assert rules.event_finding(given, NOW) == expected


def gpu_node(conditions=(), unschedulable=False) -> dict:
    from warden.fakeobjects import make_node

    node = make_node("gpu-1")
    node["spec"]["unschedulable"] = unschedulable
    node["status"]["conditions"] += [{"type": t, "status": "True", "reason": r}
                                     for t, r in conditions]  # fmt: skip
    return node


@pytest.mark.parametrize(
    ("node", "severity"),
    [
        (gpu_node([("GpuXidError", "Xid79")]), DEFINITE),
        (gpu_node([("FrequentKubeletRestart", "x")]), AMBIGUOUS),
        (gpu_node([("GpuXidError", "Xid79")], unschedulable=True), None),  # Warden's already
        (gpu_node(), None),
    ],
)
def test_node_finding(node, severity):
    found = rules.node_finding(node, rules.RuleConfig(), datetime.now(UTC))
    assert (found.severity if found else None) == severity


async def watching(h, body, watch_s: float = 1.0):
    """Run `body(watch)` with a NodeWatch over the harness's fleet (no sweep)."""
    acts = h.activities()
    watch = NodeWatch(acts.kube, h.client, h.queue, h.timings, rules.RuleConfig(), watch_s)
    stop = asyncio.Event()
    task = asyncio.create_task(watch.run(stop))
    try:
        return await body(watch)
    finally:
        stop.set()
        await task


async def until(check, timeout_s: float = 30.0):
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "not in time"
        await asyncio.sleep(0.05)


def test_a_node_condition_and_a_node_event_each_cordon_without_a_sweep(harness):
    fleet = harness.fleet
    a, b, c, d = (fleet.node_name(i) for i in range(4))
    fleet.add_node_event(c, "KernelOops", XID79, seconds_ago=3600)  # before: history
    fleet.kube.patch_node(d, True, {})  # someone cordoned d: not Warden's

    async def body(watch):
        await asyncio.sleep(0.5)
        fleet.set_condition(a, "GpuXidError", "Xid79")
        fleet.add_node_event(b, "KernelOops", XID79)
        fleet.add_node_event(d, "KernelOops", XID79)
        await until(lambda: {a, b} <= set(fleet.counts("cordon")))
        await asyncio.sleep(1.5)  # the watches resumed at least once meanwhile
        return dict(watch.counts)

    counts = harness.run(lambda h: watching(h, body))
    assert fleet.counts("cordon") == {a: 1, b: 1, d: 1}  # d's: the person's, before
    assert counts["started"] == 2 and counts.get("failed", 0) == 0


def test_a_watch_too_old_to_resume_starts_again_and_one_refused_backs_off(harness):
    fleet = harness.fleet
    a, b = fleet.node_name(0), fleet.node_name(1)
    fleet.inject("kube", "watch_nodes", 410, times=1)
    fleet.inject("kube", "watch_node_events", 503, times=2)

    async def body(watch):
        await asyncio.sleep(0.5)
        fleet.set_condition(a, "KernelDeadlock", "hung")
        fleet.add_node_event(b, "KernelOops", XID79, seconds_ago=1)
        await until(lambda: {a, b} <= set(fleet.counts("cordon")), timeout_s=60)
        return dict(watch.counts)

    counts = harness.run(lambda h: watching(h, body))
    assert counts["watch_errors"] == 2 and counts["started"] == 2
    assert fleet.counts("fault") == {"kube.watch_nodes 410": 1, "kube.watch_node_events 503": 2}


class Streamer:
    """A local API server whose watch answers the given lines, one per write."""

    def __init__(self, lines: list[dict], status: int = 200):
        self.paths: list[str] = []
        streamer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (the http.server API)
                streamer.paths.append(self.path)
                self._send(status, [json.dumps(line).encode() + b"\n" for line in lines])

            def _send(self, code, parts):
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                for part in parts:
                    self.wfile.write(part)
                    self.wfile.flush()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def real(url: str) -> RealKube:
    from kubernetes import client

    config = client.Configuration()
    config.host = url
    return RealKube(client.ApiClient(config), timeout_s=5)


def test_the_real_adapters_watch_requests_and_lines():
    node = {"metadata": {"name": "n1", "resourceVersion": "12"}}
    bookmark = {"metadata": {"resourceVersion": "15"}}
    gone = {"code": 410, "message": "too old"}
    server = Streamer([{"type": "ADDED", "object": node}, {"type": "BOOKMARK", "object": bookmark},
                       {"type": "ERROR", "object": gone}])  # fmt: skip
    try:
        kube = real(server.url)
        seen = []
        with pytest.raises(NotFound, match="too old"):
            for change in kube.watch_nodes("10", 30):
                seen.append(change)
        assert seen == [("ADDED", node), ("BOOKMARK", bookmark)]
        assert next(iter(kube.watch_node_events("0", 30)))[0] == "ADDED"
    finally:
        server.close()
    assert server.paths == [
        "/api/v1/nodes?watch=1&allowWatchBookmarks=true&resourceVersion=10&timeoutSeconds=30",
        "/api/v1/events?fieldSelector=involvedObject.kind%3DNode&watch=1&"
        "allowWatchBookmarks=true&resourceVersion=0&timeoutSeconds=30",
    ]
