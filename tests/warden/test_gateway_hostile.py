"""Warden's gateway against hostile peers: nothing a peer sends takes a slot without a valid
token, holds one longer than a request may take, or gets a 500.

The slow-loris lock (16 clients sending a byte every 5 s held all 16 slots), the order of
the checks (a token before a slot), what each bad header or body is answered, the token
reviews' cache and bound, and 200 cases of the hostile-peer suite (tests/peers; 1,000 in
scripts/bench/hostile_http_bench.py) against a gateway in a process of its own.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from dataclasses import replace

import pytest

from tests.peers.suite import check_suite
from tests.warden import test_gateway
from tests.warden.test_gateway import raw
from warden import gateway as gateway_module
from warden import reviews
from warden.access import Refusal
from warden.errors import api_error
from warden.gateway import MAX_IN_FLIGHT

gate = test_gateway.gate  # the fixture: a gateway over a fake cluster, no Temporal


def post(url: str, token: str, body: bytes, path: str = "/v1/stragglers", **headers):
    sent = {"Content-Type": "application/json", "Authorization": f"Bearer {token}", **headers}
    return raw(url, path, body, sent)


def no_pods_finding(fleet) -> bytes:
    """A finding on a node without the team's pods: refused 403, after taking a slot."""
    finding = {"rank": 1, "node": fleet.node_name(1), "persistent": True,
               "straggler_windows": 3, "windows": 4, "delay_us": 10.0}  # fmt: skip
    return json.dumps({"findings": [finding]}).encode()


def readable(sock, timeout_s: float) -> bool:
    """Whether `sock` has data or an end to read within `timeout_s` (poll: the whole suite's
    process holds descriptors past select()'s 1023)."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(timeout_s * 1000))


def trickle(port: int, head: bytes, data: bytes, every_s: float, stop: threading.Event,
            out: list) -> None:  # fmt: skip
    """Send `head`, then `data` a byte every `every_s` seconds until the server answers or
    closes; the first line of its answer goes to `out`."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(head)
        for byte in data:
            if readable(sock, 0):  # an answer, or the end
                break
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                break
            if readable(sock, every_s) or stop.is_set():
                break
        sock.settimeout(30)
        try:
            out.append(sock.recv(4096).split(b"\r\n", 1)[0])
        except OSError as err:
            out.append(repr(err).encode())


def loris(gate, head: bytes, data: bytes) -> list[bytes]:
    """16 clients sending `head`, then `data` a byte every 5 s, while a good request is
    served (it takes a slot): their answers' first lines."""
    fleet, gateway, url, token_file = gate
    port = int(url.rsplit(":", 1)[1])
    stop, answers = threading.Event(), []
    crowd = [threading.Thread(target=trickle, args=(port, head, data, 5.0, stop, answers))
             for _ in range(16)]  # fmt: skip
    for thread in crowd:
        thread.start()
    try:
        time.sleep(1.0)
        with open(token_file()) as f:
            assert post(url, f.read(), no_pods_finding(fleet))[0] == 403  # served
        assert gateway.in_flight == 0
        for thread in crowd:
            thread.join(timeout=gateway_module.LIMITS.request_s + 10)
    finally:
        stop.set()
    return answers


def test_sixteen_clients_sending_a_body_a_byte_every_5s_hold_no_slot(gate):
    """The lock of issue 30: 16 clients without a token send their headers, then the body a
    byte every 5 s. The token is checked before a slot and the body: each is refused at
    once, and a good request is served meanwhile."""
    body = no_pods_finding(gate[0])
    head = (f"POST /v1/stragglers HTTP/1.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()  # fmt: skip
    assert loris(gate, head, body) == [b"HTTP/1.0 401 Unauthorized"] * 16


def test_sixteen_clients_sending_headers_a_byte_every_5s_are_cut_at_the_request_time(gate):
    """The same with the headers too a byte every 5 s: they hold connections (64 at most),
    never a slot, and each is cut (408) once LIMITS.request_s has passed."""
    body = no_pods_finding(gate[0])
    request = (f"POST /v1/stragglers HTTP/1.1\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body  # fmt: skip
    assert loris(gate, b"", request) == [b"HTTP/1.0 408 Request Timeout"] * 16


@pytest.fixture
def quick(monkeypatch):
    """Gateways served from now on give a request 3 s (the default is LIMITS.request_s)."""
    monkeypatch.setattr(gateway_module, "LIMITS", replace(gateway_module.LIMITS, request_s=3.0))


def test_slow_bodies_of_good_tokens_hold_slots_only_for_the_request_time(quick, gate):
    fleet, gateway, url, token_file = gate
    port = int(url.rsplit(":", 1)[1])
    with open(token_file()) as f:
        token = f.read()
    body = no_pods_finding(fleet)
    head = (
        f"POST /v1/stragglers HTTP/1.1\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {token}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    sockets = [socket.create_connection(("127.0.0.1", port)) for _ in range(MAX_IN_FLIGHT)]
    try:
        for sock in sockets:
            sock.sendall(head + body[:5])  # and then nothing: the slot is held ...
        deadline = time.monotonic() + 5
        while gateway.in_flight < MAX_IN_FLIGHT and time.monotonic() < deadline:
            time.sleep(0.05)
        assert gateway.in_flight == MAX_IN_FLIGHT
        assert post(url, token, body)[0] == 429  # ... for now
        for sock in sockets:  # ... until the request's time ran out
            sock.settimeout(gateway_module.LIMITS.request_s + 10)
            assert sock.recv(4096).startswith(b"HTTP/1.0 408 ")
        assert gateway.in_flight == 0 and post(url, token, body)[0] == 403
    finally:
        for sock in sockets:
            sock.close()


def test_the_token_is_checked_before_a_slot_is_taken(gate):
    fleet, gateway, url, token_file = gate
    body = no_pods_finding(fleet)
    for _ in range(MAX_IN_FLIGHT):
        gateway._slots.acquire()
    try:
        assert post(url, "not-a-token", body)[0] == 401  # refused for its token, not for room
        with open(token_file()) as f:
            assert post(url, f.read(), body)[0] == 429
    finally:
        for _ in range(MAX_IN_FLIGHT):
            gateway._slots.release()


DEEP = b'{"findings": ' + b"[" * 20_000 + b"]" * 20_000 + b"}"


@pytest.mark.parametrize(
    ("body", "headers", "status", "reason"),
    [
        (DEEP, {}, 400, "body is not JSON the gateway takes: nested deeper than 8 levels"),
        (b'{"findings": [{"delay_us": NaN}]}', {}, 400, "NaN is not a number JSON allows"),
        (b'{"findings": [{"delay_us": 1e999}]}', {}, 400, "number 1e999 is not finite"),
        (b"{}", {"Content-Length": "\u00b2"}, 400, "Content-Length '²' is not one decimal"),
        (b"{}", {"Content-Length": "9" * 30}, 413, "body of 99999999999999999999 bytes is over"),
        (b"{}", {"Transfer-Encoding": "chunked"}, 400, "Transfer-Encoding is not supported"),
        (b"{}", {"Authorization": "Bearer " + "x" * 9000}, 401, "token not accepted: a token of"),
        (b"{}", {"Authorization": "Bearer a\u00e9b"}, 401, "token not accepted: a token with"),
        (b"{}", {"Authorization": "Basic dXNlcjpwdw=="}, 401, "no bearer token"),
    ],
    ids=["deep", "nan", "1e999", "superscript-length", "huge-length", "chunked", "long-token",
         "token-chars", "basic"],
)  # fmt: skip
def test_bad_headers_and_bodies_are_4xx_never_500(gate, body, headers, status, reason):
    fleet, gateway, url, token_file = gate
    with open(token_file()) as f:
        token = f.read()
    got = post_raw(url, token, body, headers)
    assert got[0] == status and reason in got[1], got
    assert gateway.counts[("/v1/stragglers", status)] == 1


def post_raw(url: str, token: str, body: bytes, headers: dict) -> tuple[int, str]:
    """A POST written byte by byte (urllib refuses some of these headers)."""
    sent = {"Content-Type": "application/json", "Authorization": f"Bearer {token}",
            "Content-Length": str(len(body)), **headers}  # fmt: skip
    head = "POST /v1/stragglers HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in sent.items())
    port = int(url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head.encode("latin-1") + b"\r\n" + body)
        data = read_all(sock)
    status, _, rest = data.partition(b"\r\n\r\n")
    return int(status.split()[1]), json.loads(rest)["error"]


def read_all(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_a_body_that_stops_short_is_400_and_one_that_stalls_is_408(quick, gate):
    fleet, gateway, url, token_file = gate
    with open(token_file()) as f:
        token = f.read()
    port = int(url.rsplit(":", 1)[1])
    head = (
        f"POST /v1/stragglers HTTP/1.1\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {token}\r\nContent-Length: 100\r\n\r\n{{"
    ).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head)
        sock.shutdown(socket.SHUT_WR)
        assert b'{"error": "body of 1 bytes, not the 100 announced"}' in read_all(sock)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head)
        assert read_all(sock).startswith(b"HTTP/1.0 408 ")
    assert gateway.counts[("/v1/stragglers", 400)] == 1
    assert gateway.counts[("/v1/stragglers", 408)] == 1


def test_token_reviews_are_cached_bounded_and_shaped():
    calls, now = [], [0.0]

    def review(token, audiences):
        calls.append(token)
        if token == "slow":
            release.wait(5)
        if token == "down":
            raise api_error("kube", "review_token", None, "timed out")
        return {"authenticated": token == "good", "audiences": audiences}

    release = threading.Event()
    cached = reviews.Reviews(review, "warden", clock=lambda: now[0])
    assert cached.status("good")["authenticated"] and cached.status("good")["authenticated"]
    assert not cached.status("bad")["authenticated"] and not cached.status("bad")["authenticated"]
    assert calls == ["good", "bad"]  # a replay costs no review within CACHE_S
    now[0] += reviews.CACHE_S
    cached.status("good")
    assert calls == ["good", "bad", "good"]
    with pytest.raises(Refusal, match="a token of 8193 characters"):
        cached.status("x" * 8193)
    with pytest.raises(Refusal) as refused:
        cached.status("down")
    assert refused.value.status == 504  # Kubernetes did not answer; not cached
    threads = [threading.Thread(target=cached.status, args=("slow",), daemon=True)
               for _ in range(reviews.MAX_REVIEWS)]  # fmt: skip
    for thread in threads:
        thread.start()
    while calls.count("slow") < reviews.MAX_REVIEWS:
        time.sleep(0.01)
    with pytest.raises(Refusal) as refused:
        cached.status("another")
    assert refused.value.status == 429
    release.set()
    for thread in threads:
        thread.join()


def test_hostile_peers():
    """200 cases of the hostile-peer suite (1,000: scripts/bench/hostile_http_bench.py)."""
    check_suite("gateway", count=200)
