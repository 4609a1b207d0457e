"""Shared pieces of the transport tests: a test handler and servers in threads or processes."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import struct
import threading
import time
from collections.abc import Iterator

from driver.aux.errors import AuxError
from driver.aux.proxy import ProxyServer
from driver.aux.worker import WorkerServer

SPAWN = mp.get_context("spawn")


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


class Processes:
    """Workers and proxies, each in its own (spawned) process, by name: started, SIGKILLed,
    started again on the same address; all stopped by `close()`."""

    def __init__(self, tmp_path):
        self.stop = str(tmp_path / "stop")
        self.procs: dict[str, mp.Process] = {}
        self.addresses = SPAWN.Queue()

    def start_worker(self, address: str, delay_s: float = 0.005, **kw) -> str:
        proc = SPAWN.Process(target=serve_worker, args=(address, self.stop, delay_s),
                             kwargs=kw, daemon=True)  # fmt: skip
        proc.start()
        self.procs[address] = proc
        return address

    def start_proxy(self, name: str, workers: list[str], bind: str | None = None) -> str:
        args = (workers, self.addresses, self.stop, bind)
        self.procs[name] = SPAWN.Process(target=serve_proxy, args=args, daemon=True)
        self.procs[name].start()
        return self.addresses.get(timeout=60)

    def kill(self, name: str) -> None:
        os.kill(self.procs[name].pid, signal.SIGKILL)
        self.procs[name].join(10)

    def close(self) -> None:
        open(self.stop, "w").close()
        for proc in self.procs.values():
            proc.join(10)
            if proc.exitcode is None:
                proc.kill()


class Load:
    """Threads calling without pause; counts replies and typed errors per outcome (and,
    with method "pid", the replies of each worker process)."""

    def __init__(self, client, threads=4, method="echo"):
        self.client, self.method, self.sent, self.replies = client, method, 0, 0
        self.pids: dict[int, int] = {}
        self.errors: dict[str, int] = {}
        self.untyped: list[BaseException] = []
        self.lock, self.running = threading.Lock(), True
        self.threads = [
            threading.Thread(target=self.run, args=(t,), daemon=True) for t in range(threads)
        ]
        for thread in self.threads:
            thread.start()

    def run(self, t):
        i = 0
        while self.running:
            with self.lock:
                self.sent += 1
            try:
                reply = self.client.call(self.method, {"t": t, "i": i})
                assert self.method != "echo" or reply == {"t": t, "i": i}
                with self.lock:
                    self.replies += 1
                    if "pid" in reply:
                        self.pids[reply["pid"]] = self.pids.get(reply["pid"], 0) + 1
            except AuxError as err:
                with self.lock:
                    self.errors[err.code] = self.errors.get(err.code, 0) + 1
            except BaseException as err:  # anything untyped fails the test
                self.untyped.append(err)
            i += 1

    def stop(self):
        self.running = False
        for thread in self.threads:
            thread.join(30)
        return self.sent, self.replies, sum(self.errors.values())


def wait_for(predicate, timeout=30.0):
    limit = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < limit, "condition not reached in time"
        time.sleep(0.05)


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
