"""Benchmark the auxiliary-service remote-call layer against Ray actor calls, in one run.

    python scripts/bench/aux_rpc_bench.py                 # ~1-2 min on 2 busy cores
    python scripts/bench/aux_rpc_bench.py --seconds 60    # the scale case over a minute
    python scripts/bench/aux_rpc_bench.py --no-ray --calls 50 --ranks 100 --seconds 1  # tiny
    python scripts/bench/aux_rpc_bench.py --threads       # CPU per thread per 1 KiB call only

Our side: the training process's AuxClient -> a ProxyServer process (TCP) -> WorkerServer
processes (IPC) running an echo handler. Ray's side: an actor (`ray.init` on this host)
with the same echo method. Same payloads on both sides:

Both sides are up together and every figure is taken in `--rounds` rounds (3), the sides
taking turns, so load that drifts during a run hits both alike; latencies pool the rounds'
samples, rates and 16 MiB times take the median.

1. Round trip of a 1 KiB request, one call at a time: p50 and p99, ours ÷ `ray.get` of an
   actor method call (goal p50 ratio <= 0.25).
2. Pipelined requests/s, `--window` requests in flight, ours ÷ an async Ray actor's calls
   submitted the same way (goal >= 4).
3. A 16 MiB float32 array round trip (sent and echoed back): ours ÷ Ray passing it through
   its object store as the argument and the return value (goal <= 0.5). On one node ours
   goes through shared memory (driver/aux/shm.py); two warm-up calls on each side.
4. Scale: one proxy and `--workers` workers under `--ranks` (10,000) simulated ranks, each
   keeping one request outstanding; served per rank over `--seconds` after a warm-up in
   which every rank is served once: max/min (goal <= 1.2) and ranks never served (goal 0).
   The issue's figure is over a minute (`--seconds 60`); the default is shorter.

Also printed, for scale: the same 1 KiB round trip through a bare chain of the same three
processes (a DEALER, a ROUTER -> ROUTER forwarder in a Python poll loop, a ROUTER echo; no
checks, no state): what ZeroMQ and the process layout cost before any of our code.

`--threads` prints instead where a 1 KiB round trip's CPU goes: per thread of the client,
the proxy and the worker (scripts/bench/thread_cpu.py), ours against the bare chain,
`--calls` sequential calls per side and `--rounds` rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
import zmq

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from driver.aux.client import AuxClient  # noqa: E402
from driver.messaging import wire  # noqa: E402


class Echo:
    """The benchmark's handler: returns its payload."""

    def setup(self) -> None:
        pass

    def ready(self) -> dict:
        return {}

    def handle(self, method: str, payload: dict, ctx) -> dict:
        return payload


def serve(role: str, address: str, workers: list[str]) -> None:
    """Child process: a worker at `address` or a proxy over `workers`; prints its address."""
    from driver.aux.proxy import ProxyServer
    from driver.aux.worker import WorkerServer

    if role.startswith("floor"):
        return floor_serve(role, address, workers)
    if role == "worker":
        server = WorkerServer(Echo(), address, queue_bound=64)
    else:
        server = ProxyServer("echo", workers)
    print(server.start(), flush=True)
    sys.stdin.read()  # until the parent closes our stdin
    server.stop()


def floor_serve(role: str, address: str, workers: list[str]) -> None:
    """The floor's processes: a bare ROUTER echo, or a bare ROUTER -> ROUTER forwarder
    (no checks, no routing decisions, no state): ZeroMQ and the process layout alone."""
    print(bare_worker(address) if role == "floor-worker" else bare_proxy(workers[0]), flush=True)
    sys.stdin.read()


def bare_worker(address: str) -> str:
    """A bare ROUTER echo at `address`, served by a thread of this process; its address."""
    import threading

    sock = zmq.Context.instance().socket(zmq.ROUTER)
    sock.bind(address)

    def loop() -> None:
        while True:
            sock.send_multipart(sock.recv_multipart(copy=False), copy=False)

    threading.Thread(target=loop, daemon=True, name="bare-worker").start()
    return address


def bare_proxy(worker: str, host: str = "127.0.0.1") -> str:
    """A bare ROUTER -> ROUTER forwarder in front of `worker` (a Python poll loop in a
    thread of this process, as our proxy's); its address "tcp://host:port"."""
    import threading

    context = zmq.Context.instance()
    front, back = context.socket(zmq.ROUTER), context.socket(zmq.ROUTER)
    front.bind(f"tcp://{host}:*")
    back.setsockopt(zmq.CONNECT_ROUTING_ID, b"w")
    back.connect(worker)

    def loop() -> None:
        poller = zmq.Poller()
        poller.register(front, zmq.POLLIN)
        poller.register(back, zmq.POLLIN)
        while True:
            for sock, _ in poller.poll():
                frames = sock.recv_multipart(copy=False)
                if sock is front:
                    back.send_multipart([b"w", *frames], copy=False)
                else:
                    front.send_multipart(frames[1:], copy=False)

    threading.Thread(target=loop, daemon=True, name="bare-proxy").start()
    return front.getsockopt(zmq.LAST_ENDPOINT).decode()


class Service:
    """A proxy and its workers in child processes (`floor`: the bare ZeroMQ ones)."""

    def __init__(self, folder: str, workers: int, floor: bool = False):
        self.procs: list[subprocess.Popen] = []
        kind = "floor-" if floor else ""
        addresses = [
            self._start(f"{kind}worker", f"ipc://{folder}/{kind}w{i}.sock") for i in range(workers)
        ]
        self.address = self._start(f"{kind}proxy", "", addresses)

    def _start(self, role: str, address: str, workers: list[str] | None = None) -> str:
        cmd = [sys.executable, __file__, "--role", role, "--address", address]
        cmd += ["--worker-addresses", json.dumps(workers or [])]
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.procs.append(proc)
        return proc.stdout.readline().strip()

    def close(self) -> None:
        for proc in self.procs:
            proc.stdin.close()
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


def percentiles(samples: list[float]) -> tuple[float, float]:
    """(p50, p99) in microseconds."""
    return float(np.percentile(samples, 50) * 1e6), float(np.percentile(samples, 99) * 1e6)


def timed(call, count: int) -> list[float]:
    out = []
    for _ in range(count):
        started = time.perf_counter()
        call()
        out.append(time.perf_counter() - started)
    return out


def pipelined(submit, wait, total: int, window: int) -> float:
    """Requests per second, `window` in flight at a time."""
    started = time.perf_counter()
    for first in range(0, total, window):
        wait([submit() for _ in range(min(window, total - first))])
    return total / (time.perf_counter() - started)


class Ours:
    """Our side: an AuxClient to the proxy; each method measures one figure."""

    def __init__(self, address: str, args: argparse.Namespace, small: dict, big: np.ndarray):
        self.client = AuxClient("echo", 0, {address: 1}, deadline_s=60)
        self.args, self.small, self.big = args, small, big
        timed(lambda: self.client.call("echo", small), args.calls // 5)  # warm-up
        for _ in range(2):  # the first sets up the shared-memory segments
            assert np.array_equal(self.client.call("echo", {"x": big})["x"], big)

    def latency(self) -> list[float]:
        return timed(lambda: self.client.call("echo", self.small), self.args.calls)

    def rate(self) -> float:
        submit = lambda: self.client.submit("echo", self.small)  # noqa: E731
        wait = lambda futures: [f.result() for f in futures]  # noqa: E731
        return pipelined(submit, wait, self.args.pipelined, self.args.window)

    def tensor(self) -> list[float]:
        return timed(lambda: self.client.call("echo", {"x": self.big}), self.args.big_calls)

    def close(self) -> None:
        self.client.close()


def floor(address: str, args: argparse.Namespace, small: dict) -> list[float]:
    """Round trips of the same 1 KiB through the bare chain (`floor_serve`)."""
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(address)
    frames = [b"req", small["x"]]

    def call() -> None:
        sock.send_multipart(frames)
        sock.recv_multipart()

    timed(call, args.calls // 5)
    latency = timed(call, args.calls)
    sock.close(0)
    return latency


class Theirs:
    """Ray's side: a sync actor (`ray.get` per call) and an async one (pipelined)."""

    def __init__(self, args: argparse.Namespace, small: dict, big: np.ndarray):
        import ray

        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")

        @ray.remote
        class EchoActor:
            def echo(self, payload):
                return payload

        @ray.remote
        class AsyncEchoActor:
            async def echo(self, payload):
                return payload

        self.ray, self.args, self.small, self.big = ray, args, small, big
        self.actor = EchoActor.remote()
        self.aio = AsyncEchoActor.options(max_concurrency=1000).remote()
        ray.get([self.actor.echo.remote(small), self.aio.echo.remote(small)])
        timed(lambda: ray.get(self.actor.echo.remote(small)), args.calls // 5)
        for _ in range(2):
            assert np.array_equal(ray.get(self.actor.echo.remote({"x": big}))["x"], big)

    def latency(self) -> list[float]:
        get, echo = self.ray.get, self.actor.echo
        return timed(lambda: get(echo.remote(self.small)), self.args.calls)

    def rate(self) -> float:
        echo = self.aio.echo
        submit = lambda: echo.remote(self.small)  # noqa: E731
        return pipelined(submit, self.ray.get, self.args.pipelined, self.args.window)

    def tensor(self) -> list[float]:
        get, echo = self.ray.get, self.actor.echo
        return timed(lambda: get(echo.remote({"x": self.big})), self.args.big_calls)

    def close(self) -> None:
        self.ray.shutdown()


def measure(sides: list, rounds: int) -> list[dict]:
    """Each figure in `rounds` rounds, the sides taking turns (who goes first alternates):
    load that drifts during the run hits both sides alike."""
    out = [{"latency": [], "rates": [], "big": []} for _ in sides]
    for r in range(rounds):
        order = list(range(len(sides)))[:: 1 if r % 2 == 0 else -1]
        for figure in ("latency", "rate", "tensor"):
            for i in order:
                got = getattr(sides[i], figure)()
                if figure == "rate":
                    out[i]["rates"].append(got)
                else:
                    out[i]["latency" if figure == "latency" else "big"] += got
    for o in out:
        o["rate"], o["big"] = float(np.median(o["rates"])), float(np.median(o["big"]))
    return out


def scale(address: str, ranks: int, seconds: float, sockets: int = 8) -> dict:
    """`ranks` simulated ranks over `sockets` connections, one request outstanding each;
    served per rank counted over `seconds` after every rank was served once."""
    context = zmq.Context.instance()
    socks = []
    for _ in range(sockets):
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.setsockopt(zmq.RCVHWM, 0)
        sock.connect(address)
        socks.append(sock)
    body = wire.encode({"x": b"\0" * 64})
    served = np.zeros(ranks, np.int64)
    seq = np.zeros(ranks, np.int64)
    errors = 0

    def send(rank: int) -> None:
        seq[rank] += 1
        rid = int(seq[rank]) * ranks + rank
        msg = wire.Message("req", rid, rank, "echo", time.time() + 120, body=body)
        socks[rank % sockets].send_multipart(wire.pack(msg), copy=False)

    for rank in range(ranks):
        send(rank)
    poller = zmq.Poller()
    for sock in socks:
        poller.register(sock, zmq.POLLIN)
    window_start = window_end = None
    while window_end is None or time.monotonic() < window_end:
        for sock, _ in poller.poll(100):
            for _ in range(1000):
                try:
                    frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
                except zmq.Again:
                    break
                msg = wire.parse(frames, 1 << 20)
                if msg.kind == "pong":
                    continue
                rank = msg.id % ranks
                if msg.kind == "rep":
                    served[rank] += 1
                else:
                    errors += 1
                send(rank)
        if window_start is None and served.min() >= 1:
            window_start, baseline = time.monotonic(), served.copy()
            window_end = window_start + seconds
    counts = served - baseline
    for sock in socks:
        sock.close(0)
    return {
        "ranks": ranks,
        "total": int(counts.sum()),
        "rate": float(counts.sum() / seconds),
        "min": int(counts.min()),
        "max": int(counts.max()),
        "starved": int((counts == 0).sum()),
        "errors": errors,
    }


def thread_figures(folder: str, args: argparse.Namespace, small: dict) -> None:
    """CPU per thread and 1 KiB round trip: ours and the bare chain, taking turns."""
    from scripts.bench.thread_cpu import ThreadCpu

    ours, bare = Service(folder, workers=1), Service(folder, workers=1, floor=True)
    client = AuxClient("echo", 0, {ours.address: 1}, deadline_s=60)
    try:
        timed(lambda: client.call("echo", small), max(1, args.calls // 5))  # warm-up
        for r in range(args.rounds):
            for name, service in (("ours", ours), ("bare", bare)):
                pids = {"client": os.getpid(), "proxy": service.procs[-1].pid,
                        "worker": service.procs[0].pid}  # fmt: skip
                with ThreadCpu(pids) as cpu:
                    if name == "ours":
                        took, calls = timed(lambda: client.call("echo", small), args.calls), 0
                    else:  # the floor's own warm-up is inside the reading
                        took, calls = floor(service.address, args, small), args.calls // 5
                p50 = percentiles(took)[0]
                print(f"round {r + 1} {name}: p50 {p50:.1f} us; CPU per call by thread:")
                for line in cpu.lines(per=len(took) + calls):
                    print(f"  {line}")
    finally:
        client.close()
        ours.close()
        bare.close()


def ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def report(mine: dict, theirs: dict | None, scaled: dict) -> None:
    p50, p99 = percentiles(mine["latency"])
    print(f"1 KiB round trip   ours p50 {p50:8.1f} us  p99 {p99:8.1f} us")
    if mine.get("floor"):
        f50, f99 = percentiles(mine["floor"])
        print(f"1 KiB round trip   floor p50 {f50:8.1f} us  p99 {f99:8.1f} us (bare ZeroMQ)")
    rates = "/".join(f"{r:.0f}" for r in mine.get("rates", []))
    print(f"pipelined          ours {mine['rate']:9.0f} req/s (median; rounds {rates})")
    print(f"16 MiB round trip  ours {mine['big'] * 1e3:8.2f} ms")
    if mine.get("floor"):
        print(f"ratio ours / floor  {ratio(p50, percentiles(mine['floor'])[0]):.3f} (p50)")
    if theirs is not None:
        r50, r99 = percentiles(theirs["latency"])
        print(f"1 KiB round trip   Ray  p50 {r50:8.1f} us  p99 {r99:8.1f} us")
        rates = "/".join(f"{r:.0f}" for r in theirs["rates"])
        print(f"pipelined          Ray  {theirs['rate']:9.0f} req/s (async actor; rounds {rates})")
        print(f"16 MiB round trip  Ray  {theirs['big'] * 1e3:8.2f} ms (object store)")
        print(
            f"ratio p50 latency   {ratio(p50, r50):.3f} [goal <= 0.25]  (p99 {ratio(p99, r99):.3f})"
        )
        print(f"ratio pipelined     {ratio(mine['rate'], theirs['rate']):.3f} [goal >= 4]")
        pairs = zip(mine["rates"], theirs["rates"], strict=True)
        rounds = " ".join(f"{ratio(a, b):.2f}" for a, b in pairs)
        print(f"  per round         {rounds} (ours ÷ Ray; the figure is of the medians)")
        print(f"ratio 16 MiB        {ratio(mine['big'], theirs['big']):.3f} [goal <= 0.5]")
    spread = ratio(scaled["max"], scaled["min"])
    print(
        f"scale: {scaled['ranks']} ranks, {scaled['total']} served ({scaled['rate']:.0f}/s), "
        f"per rank min {scaled['min']} max {scaled['max']}, starved {scaled['starved']}, "
        f"errors {scaled['errors']}"
    )
    print(f"ratio max/min per rank {spread:.3f} [goal <= 1.2, starved 0]")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--calls", type=int, default=1000, help="sequential 1 KiB calls per side and round")
    add("--pipelined", type=int, default=5000, help="pipelined calls per side and round")
    add("--window", type=int, default=256, help="requests in flight when pipelining")
    add("--big-calls", type=int, default=10, help="16 MiB round trips per side and round")
    add("--rounds", type=int, default=3, help="rounds of every figure, the sides taking turns")
    add("--workers", type=int, default=2, help="workers behind the proxy in the scale case")
    add("--ranks", type=int, default=10_000, help="simulated ranks in the scale case")
    add("--seconds", type=float, default=30.0, help="scale case window (the issue: 60)")
    add("--no-ray", action="store_true", help="our side only")
    add("--threads", action="store_true", help="CPU per thread of a 1 KiB call, ours and bare")
    roles = ["bench", "worker", "proxy", "floor-worker", "floor-proxy"]
    add("--role", choices=roles, default="bench", help=argparse.SUPPRESS)
    add("--address", default="", help=argparse.SUPPRESS)
    add("--worker-addresses", default="[]", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.role != "bench":
        serve(args.role, args.address, json.loads(args.worker_addresses))
        return 0
    import tempfile

    load = os.getloadavg()
    print(f"host: {os.cpu_count()} CPUs, load average {load[0]:.1f} / {load[1]:.1f}")
    small = {"x": np.random.default_rng(0).bytes(1024)}
    if args.threads:
        with tempfile.TemporaryDirectory(prefix="aux-bench-") as folder:
            thread_figures(folder, args, small)
        return 0
    big = np.random.default_rng(1).random(4 << 20, dtype=np.float32)  # 16 MiB
    with tempfile.TemporaryDirectory(prefix="aux-bench-") as folder:
        service = Service(folder, workers=1, floor=True)
        try:
            floor_latency = floor(service.address, args, small)
        finally:
            service.close()
        service, sides = Service(folder, workers=1), []
        try:
            sides.append(Ours(service.address, args, small, big))
            if not args.no_ray:
                sides.append(Theirs(args, small, big))
            results = measure(sides, args.rounds)
        finally:
            for side in sides:
                side.close()
            service.close()
        mine, theirs = results[0], (results[1] if len(results) > 1 else None)
        mine["floor"] = floor_latency
        service = Service(folder, workers=args.workers)
        try:
            scaled = scale(service.address, args.ranks, args.seconds)
        finally:
            service.close()
    report(mine, theirs, scaled)
    load = os.getloadavg()
    print(f"load average at end: {load[0]:.1f} / {load[1]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
