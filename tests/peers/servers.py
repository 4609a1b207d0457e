"""The servers the hostile-peer suites attack, each in a child process of its own, so its
memory and threads are its own to measure.

    server = ServerProcess.start("gateway", request_s=2.0)   # or "ui"
    server.port, server.info["token"]    # where it listens; what a good peer presents
    server.stats()   # {"rss_kib", "threads", "open", "in_flight", "counts", "errors"}
    server.close()

The child (`python -m tests.peers.servers gateway|ui REQUEST_S`) prints one JSON line
(port and what a good peer needs), then answers a JSON line of stats for each `stats` line
on its stdin, and exits on end of input. The gateway runs over a fake cluster (one
RayCluster, one pod of the team on node 0) and a Temporal stand-in whose workflows never
finish (a good shrink is 202 after `wait_s`; `replicas_to: 0` never starts, 504); the UI
over an outputs folder with one run (metrics.jsonl, summary.json).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

from tests.support.tmp import temp_folder

ROOT = Path(__file__).resolve().parents[2]
NS, CLUSTER, GROUP = "research", "lm-x7", "h200"
TEAM, RUN = "research", "tiny"


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class _Temporal:
    """A Temporal client stand-in: a workflow start answers at once (never, for a shrink to
    0 replicas: the gateway's wait for the start then times out), its result never."""

    class Handle:
        id = "shrink-stand-in"

        async def result(self):
            await asyncio.sleep(3600)

    async def start_workflow(self, name, inp, **kwargs):
        if getattr(inp, "replicas_to", None) == 0:
            await asyncio.sleep(3600)
        return self.Handle() if name == "ShrinkWorkflow" else None


def _gateway(request_s: float):
    from warden import gateway as module
    from warden.fakefleet import FakeCluster

    fleet = FakeCluster.create(nodes=2, prefix="gw")
    fleet.add_raycluster(NS, CLUSTER, {GROUP: 4})
    fleet.add_pod(f"{CLUSTER}-worker-0", NS, fleet.node_name(0))
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="temporal-loop", daemon=True).start()
    module.START_TIMEOUT_S = 1.0
    module.LIMITS = replace(module.LIMITS, request_s=request_s)
    gate = module.Gateway(fleet.kube, _Temporal(), "warden", loop, wait_s=0.2)
    server = gate.serve("127.0.0.1:0")
    info = {"token": fleet.issue_token(NS), "node": fleet.node_name(0),
            "other_node": fleet.node_name(1),
            "tokens": {"expired": fleet.issue_token(NS, ttl_s=-1),
                       "audience": fleet.issue_token(NS, audience="kubernetes"),
                       "account": fleet.issue_token(NS, service_account="default"),
                       "namespace": fleet.issue_token("other")}}  # fmt: skip
    return server, info, lambda: gate.in_flight, gate.counts


def _ui(request_s: float):
    from runner.ui import server as module
    from runner.ui.sources import LocalSource

    outputs = Path(temp_folder("hostile-ui-"))
    folder = outputs / TEAM / RUN
    folder.mkdir(parents=True)
    rows = [
        {"step": s, "loss": 1.0 / s, "step_time": 0.05, "time": 1.7e9 + s} for s in range(1, 50)
    ]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "summary.json").write_text(json.dumps({"steps": 49, "world_size": 1}))
    module.SERVER = replace(module.SERVER, request_s=request_s)
    server = module.make_server(LocalSource(outputs), "127.0.0.1", 0)
    from runner.boundedhttp import serve_in_thread

    serve_in_thread(server, "runner-ui")
    return server, {"team": TEAM, "run": RUN}, lambda: 0, {}


def child(kind: str, request_s: float) -> int:
    logging.disable(logging.WARNING)  # refusals are counted; the suite reads the counts
    server, info, in_flight, counts = (_gateway if kind == "gateway" else _ui)(request_s)
    print(json.dumps({"port": server.server_port, **info}), flush=True)
    for _ in sys.stdin:
        stats = {"rss_kib": _rss_kib(), "threads": threading.active_count(),
                 "open": server.open_connections, "in_flight": in_flight(),
                 "server": dict(server.counts),
                 "statuses": {f"{k[0]} {k[1]}": v for k, v in counts.items()}}  # fmt: skip
        print(json.dumps(stats), flush=True)
    server.shutdown()
    return 0


class ServerProcess:
    """The parent's handle on a child server."""

    def __init__(self, proc: subprocess.Popen, info: dict):
        self.proc, self.info = proc, info
        self.port = info["port"]

    @classmethod
    def start(cls, kind: str, request_s: float = 2.0) -> ServerProcess:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.peers.servers", kind, str(request_s)], cwd=ROOT,
            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
        )  # fmt: skip
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the {kind} server did not start (exit {proc.wait()})")
        return cls(proc, json.loads(line))

    def stats(self) -> dict:
        self.proc.stdin.write("stats\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


if __name__ == "__main__":
    sys.exit(child(sys.argv[1], float(sys.argv[2])))
