"""Hostile run files and flags, and hostile peers of the HTTP services (Warden's gateway,
`runner ui`); the driver's ZeroMQ serving loops are scripts/bench/hostile_bench.py's.

    .venv/bin/python scripts/bench/hostile_http_bench.py [--cases 10000] [--peers 1000] [--seed 0]

1. Fuzz of run files and flags (tests/runner/hostile_cases.py: run definitions, DiLoCo
   experiment files, hostile locations and flags through render, validate, submit and run):
   `--cases` cases; tracebacks and hangs (goal: 0 and 0). Peer: the committed run
   definitions through the same commands; the time per hostile case ÷ per committed one.
2. Hostile-peer suites (tests/peers) against Warden's gateway and `runner ui`, each in a
   process of its own: `--peers` cases each (deep nesting, huge, short and split bodies,
   slow senders, silent connections, floods, wrong tokens, replays, non-finite numbers,
   broken request lines and headers ...); failures, serving threads lost (goal: 0 and 0)
   and the server's memory growth (goal: <= 64 MiB). Peer: a good request's latency while
   the suite runs ÷ its latency on the idle server, measured in the same run.

Exit 1 when a goal is missed. Timings depend on the machine's load; the counts do not.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.chdir(ROOT)

from runner import gitops  # noqa: E402
from tests.peers.servers import ServerProcess  # noqa: E402
from tests.peers.suite import run_suite  # noqa: E402
from tests.runner import hostile  # noqa: E402
from tests.runner.hostile_cases import fuzz  # noqa: E402

MEMORY_GOAL_MIB = 64
REQUEST_S = 2.0  # the suites' servers give a request this long (the default is 10-15 s)


def committed_case_s(rounds: int = 3) -> float:
    """Seconds per committed run definition through validate and render --dry-run."""
    runs = [str(p) for p in gitops.run_definitions()]
    started, count = time.perf_counter(), 0
    for _ in range(rounds):
        for run in runs:
            for argv in (["validate", run], ["render", run, "--dry-run"]):
                hostile.check_cli(argv)
                count += 1
    return (time.perf_counter() - started) / count


def bench_fuzz(cases: int, seed: int) -> bool:
    peer = committed_case_s()
    with tempfile.TemporaryDirectory() as tmp:
        report = fuzz(Path(tmp), cases, seed=seed)
    per = report.seconds / max(1, report.cases)
    print(f"fuzz of run files and flags: {report.line()}; {per * 1000:.1f} ms per case, "
          f"{per / peer:.2f}x a committed run definition's {peer * 1000:.1f} ms")  # fmt: skip
    for failure in [*report.tracebacks, *report.hangs][:3]:
        print(f"  FAIL {failure[:400]}")
    return not (report.tracebacks or report.hangs)


def good_request_s(port: int, kind: str) -> float:
    path = "/healthz" if kind == "gateway" else "/api/health"
    started = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        while sock.recv(65536):
            pass
    return time.perf_counter() - started


def bench_peers(kind: str, count: int, seed: int) -> bool:
    server = ServerProcess.start(kind, REQUEST_S)
    try:
        idle = statistics.median(good_request_s(server.port, kind) for _ in range(30))
        busy, done = [], threading.Event()

        def probe() -> None:
            while not done.wait(0.2):
                busy.append(good_request_s(server.port, kind))

        prober = threading.Thread(target=probe, daemon=True)
        prober.start()
        report = run_suite(server, kind, count, seed=seed, request_s=REQUEST_S)
        done.set()
        prober.join()
    finally:
        server.close()
    under = statistics.median(busy) if busy else float("nan")
    print(
        f"hostile peers, {report.line()} (goal <= {MEMORY_GOAL_MIB}); a good request "
        f"{under * 1000:.1f} ms under attack, {under / idle:.1f}x idle ({idle * 1000:.1f} ms)"
    )
    print(f"  answers: {dict(sorted(report.statuses.items()))}; server: {report.after['server']}")
    for failure in report.failures[:3]:
        print(f"  FAIL {failure[:400]}")
    good = not report.failures and report.threads_lost == 0
    return good and report.rss_growth_mib <= MEMORY_GOAL_MIB


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=10_000, help="fuzz cases")
    parser.add_argument("--peers", type=int, default=1_000, help="hostile-peer cases per server")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    results = [bench_fuzz(args.cases, args.seed)]
    results += [bench_peers(kind, args.peers, args.seed) for kind in ("gateway", "ui")]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
