"""A hostile-peer suite against one server: its cases run by a crowd of peers at once, each
answer checked, then what the server kept.

    server = ServerProcess.start("gateway", request_s=2.0)
    report = run_suite(server, "gateway", count=1000, seed=7)
    print(report.line())   # "gateway: 1000 cases ...: 0 failures, 0 serving threads lost, ..."

An answer passes when its status is one the case allows (0: the server closed without a
reply) and, for an error, its body is one line of JSON naming no file of the installation
and holding no traceback; a server that neither answers nor closes within the request's
time (plus a margin) fails the case (a hang). After the cases, once the server's
connections are closed: its threads are those it had before ("serving threads lost" counts
the difference, and any request slot still held), it still answers, no exception escaped a
handler, and its memory grew by `rss_growth_mib`.
"""

from __future__ import annotations

import collections
import json
import random
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tests.peers.cases import CLOSED, Case, cases

ROOT = str(Path(__file__).resolve().parents[2])
LEAKS = (ROOT, "site-packages", "Traceback", "/usr/lib/python")
MARGIN_S = 5.0  # beyond the request's time, before a silent server counts as a hang


@dataclass
class Report:
    kind: str
    cases: int = 0
    seconds: float = 0.0
    statuses: collections.Counter = field(default_factory=collections.Counter)
    failures: list[str] = field(default_factory=list)
    threads_lost: int = 0
    rss_growth_mib: float = 0.0
    before: dict = field(default_factory=dict)
    after: dict = field(default_factory=dict)

    def line(self) -> str:
        return (f"{self.kind}: {self.cases} cases in {self.seconds:.0f} s: "
                f"{len(self.failures)} failures, {self.threads_lost} serving threads lost, "
                f"memory growth {self.rss_growth_mib:.1f} MiB")  # fmt: skip


def answer(port: int, case: Case, request_s: float) -> tuple[int, bytes, str | None]:
    """(status, body, problem) of one connection playing `case`."""
    wait = sum(p for p, _ in case.parts) + request_s + MARGIN_S
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as sock:
        for pause, data in case.parts:
            time.sleep(pause)
            try:
                sock.sendall(data)
            except OSError:  # the server refused and closed: read what it said
                break
        if case.close_after:
            try:
                sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        sock.settimeout(wait)
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except TimeoutError:
            return CLOSED, b"", f"no answer and not closed within {wait:.0f} s"
        except OSError:  # reset by the server after its answer, or before any
            pass
    return parse(b"".join(chunks))


def parse(data: bytes) -> tuple[int, bytes, str | None]:
    if not data:
        return CLOSED, b"", None
    head, _, body = data.partition(b"\r\n\r\n")
    words = head.split(b"\r\n", 1)[0].split()
    if len(words) < 2 or not words[1].isdigit():
        return CLOSED, data, f"not an HTTP answer: {data[:80]!r}"
    return int(words[1]), body, None


def problem(case: Case, status: int, body: bytes) -> str | None:
    """Why an answer fails its case, or None."""
    if status not in case.expect:
        return f"status {status}, not one of {sorted(case.expect)}: {body[:160]!r}"
    if status < 400:
        return None
    text = body.decode("utf-8", "replace")
    if any(leak in text for leak in LEAKS):
        return f"the answer names an installation file or a traceback: {text[:160]!r}"
    try:
        error = json.loads(body)["error"] if body else ""
    except (ValueError, KeyError, TypeError):
        return f"an error that is not one line of JSON: {text[:160]!r}"
    if not isinstance(error, str) or "\n" in error:
        return f"an error that is not one line: {error!r:.160}"
    return None


def play(port: int, case: Case, request_s: float) -> list[tuple[int, str | None]]:
    """[(status, problem)] of a case: one per connection (a flood has many)."""
    results: list[tuple[int, str | None]] = []

    def one() -> None:
        try:
            status, body, fault = answer(port, case, request_s)
        except OSError as err:  # connect refused or reset: the server dropped it unanswered
            status, body, fault = CLOSED, b"", None if CLOSED in case.expect else str(err)
        results.append((status, fault or problem(case, status, body)))

    threads = [threading.Thread(target=one) for _ in range(case.connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def settle(server, baseline: dict, request_s: float) -> dict:
    """The server's stats once its connections closed and its threads ended (or the time
    a request may take, and a margin, passed)."""
    deadline = time.monotonic() + request_s + MARGIN_S * 2
    while True:
        stats = server.stats()
        done = stats["open"] == 0 and stats["threads"] <= baseline["threads"]
        if done or time.monotonic() > deadline:
            return stats
        time.sleep(0.2)


def run_suite(server, kind: str, count: int, seed: int = 0, peers: int = 16,
              request_s: float = 2.0) -> Report:  # fmt: skip
    """`count` cases of `kind` against `server` (a tests.peers.servers.ServerProcess)."""
    info = {**server.info, "host": f"127.0.0.1:{server.port}"}
    todo = cases(kind, info, random.Random(seed), request_s, count)
    report = Report(kind, cases=count, before=server.stats())
    started = time.monotonic()
    with ThreadPoolExecutor(peers) as pool:
        for case, results in zip(todo, pool.map(lambda c: play(server.port, c, request_s),
                                                todo), strict=True):  # fmt: skip
            for status, fault in results:
                report.statuses[status] += 1
                if fault:
                    report.failures.append(f"{case.kind}: {fault}")
    report.seconds = time.monotonic() - started
    report.after = settle(server, report.before, request_s)
    lost = max(0, report.after["threads"] - report.before["threads"])
    report.threads_lost = lost + report.after["in_flight"]
    report.rss_growth_mib = (report.after["rss_kib"] - report.before["rss_kib"]) / 1024
    health = play(server.port, Case("health", ((0.0, health_request(kind, info)),),
                                    frozenset({200})), request_s)  # fmt: skip
    if health[0][1]:
        report.failures.append(f"after the suite: {health[0][1]}")
    for reason in ("handler error", "restarts"):
        if report.after["server"].get(reason):
            report.failures.append(f"{report.after['server'][reason]} {reason}(s) in the server")
    return report


def health_request(kind: str, info: dict) -> bytes:
    path = "/healthz" if kind == "gateway" else "/api/health"
    return f"GET {path} HTTP/1.1\r\nHost: {info['host']}\r\n\r\n".encode()


def check_suite(kind: str, count: int, seed: int = 30, request_s: float = 2.0) -> Report:
    """Run `count` cases against a fresh server of `kind` in its own process and assert the
    goals: no failure, no serving thread lost, memory growth within 64 MiB."""
    from tests.peers.servers import ServerProcess

    server = ServerProcess.start(kind, request_s=request_s)
    try:
        report = run_suite(server, kind, count, seed=seed, request_s=request_s)
    finally:
        server.close()
    assert report.failures == [], report.failures[:5]
    assert report.threads_lost == 0, report.after
    assert report.rss_growth_mib <= 64, report.line()
    return report
