"""Shared pieces of the transport tests: a test handler and servers in threads or processes."""

from __future__ import annotations

import contextlib
import os
import struct
import time
from collections.abc import Iterator

from driver.aux.proxy import ProxyServer
from driver.aux.worker import WorkerServer


class Echo:
    """Test service: echo, sleep, boom (raises), pid, zeros (n bytes), keep (the payload),
    hold (keep it and echo it)."""

    def __init__(self, delay_s: float = 0.0):
        self.delay_s = delay_s

    def setup(self) -> None:
        pass

    def ready(self) -> dict:
        return {"pid": os.getpid()}

    def handle(self, method, payload, ctx):
        if method == "boom":
            raise ValueError("no such token")
        time.sleep(payload.get("sleep_s", self.delay_s) if isinstance(payload, dict) else 0)
        if method == "pid":
            return {"pid": os.getpid(), "rank": ctx.rank}
        if method == "zeros":
            return {"x": bytes(payload["n"])}
        if method in ("keep", "hold"):  # holds on to the request's arrays (and echoes them)
            self.kept = payload
            return {"ok": True} if method == "keep" else payload
        return payload


@contextlib.contextmanager
def processes(tmp_path, workers=1, **worker_kw) -> Iterator[str]:
    """Workers and one proxy in their own (spawned) processes: yields the proxy address."""
    import multiprocessing as mp

    spawn, stop = mp.get_context("spawn"), str(tmp_path / "stop")
    addresses = [f"ipc://{tmp_path}/w{i}.sock" for i in range(workers)]
    queue = spawn.Queue()
    procs = [
        spawn.Process(target=serve_worker, args=(a, stop, 0.0), kwargs=worker_kw, daemon=True)
        for a in addresses
    ]
    procs.append(spawn.Process(target=serve_proxy, args=(addresses, queue, stop), daemon=True))
    for proc in procs:
        proc.start()
    try:
        yield queue.get(timeout=60)
    finally:
        open(stop, "w").close()
        for proc in procs:
            proc.join(10)
            if proc.exitcode is None:
                proc.kill()


@contextlib.contextmanager
def stack(tmp_path, workers=2, delay_s=0.0, proxy_kw=None, **worker_kw) -> Iterator[tuple]:
    """Workers (threads, IPC) behind one proxy: yields (proxy address, proxy, workers)."""
    servers = [
        WorkerServer(Echo(delay_s), f"ipc://{tmp_path}/w{i}.sock", **worker_kw)
        for i in range(workers)
    ]
    addresses = [server.start() for server in servers]
    proxy = ProxyServer("echo", addresses, **(proxy_kw or {}))
    address = proxy.start()
    limit = time.monotonic() + 30
    while proxy.live_workers() < workers and time.monotonic() < limit:
        time.sleep(0.01)
    try:
        yield address, proxy, servers
    finally:
        proxy.stop()
        for server in servers:
            server.stop()


def wait_for_file(path: str) -> None:
    """Block until `path` exists (a stop signal a SIGKILLed sibling cannot wedge, unlike a
    multiprocessing Event whose set() waits for every sleeper)."""
    while not os.path.exists(path):
        time.sleep(0.05)


def serve_worker(address: str, stop_path: str, delay_s: float = 0.0, **kw) -> None:
    """Process entry: one worker until `stop_path` exists."""
    server = WorkerServer(Echo(delay_s), address, **kw)
    server.start()
    wait_for_file(stop_path)
    server.stop()


def serve_proxy(workers: list[str], addresses, stop_path: str, bind: str | None = None) -> None:
    """Process entry: one proxy until `stop_path` exists; puts its address on `addresses`."""
    proxy = ProxyServer("echo", workers, bind=bind, heartbeat_s=0.2)
    addresses.put(proxy.start())
    wait_for_file(stop_path)
    proxy.stop()


def envelope(kind=1, rid=9, rank=0, method=b"echo", deadline=4e9, sizes=(), **over) -> bytes:
    """A raw binary envelope (envelope.py's layout) whose fields may lie: `over` replaces
    "version", "kind", "count" (frames declared), "lengths" (method, code, error, info) or
    appends "text" (code + error + info bytes)."""
    text = over.get("text", b"")
    lengths = over.get("lengths", (len(method), 0, len(text), 0))
    head = struct.pack(
        "<BBHIQqdHII", over.get("version", 2), kind, lengths[0], over.get("count", len(sizes)),
        rid, rank, deadline, *lengths[1:],
    )  # fmt: skip
    return head + method + text + struct.pack(f"<{len(sizes)}Q", *sizes)
