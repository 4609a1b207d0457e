"""A worker on its own (a DEALER plays the proxy): per-rank round robin, back-pressure
policies, deadlines, cancellation and refusals, with the handler held on an Event."""

from __future__ import annotations

import threading
import time

import pytest
import zmq

from driver.aux.worker import WorkerServer
from driver.messaging.envelope import Message, pack, parse
from driver.messaging.payload import encode
from tests.aux.transport import envelope


class Gate:
    """Blocks every request until `open` is set; records (rank, i) in handling order."""

    def __init__(self):
        self.open = threading.Event()
        self.order: list[tuple[int, int]] = []
        self.started = 0

    def setup(self):
        pass

    def ready(self):
        return {}

    def handle(self, method, payload, ctx):
        self.started += 1
        self.open.wait(10)
        time.sleep(payload.get("sleep_s", 0))
        self.order.append((ctx.rank, payload["i"]))
        return {"i": payload["i"]}


@pytest.fixture
def served(tmp_path, request):
    kw = getattr(request, "param", {})
    gate = Gate()
    server = WorkerServer(gate, f"ipc://{tmp_path}/w.sock", **kw)
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 5000)
    sock.connect(server.start())
    yield gate, server, sock
    gate.open.set()
    sock.close(0)
    server.stop()


def send(sock, rank, i, deadline_s=10.0, client=b"c"):
    body = encode({"i": i})
    msg = Message("req", i, rank, "m", time.time() + deadline_s, body=body)
    sock.send_multipart([client, *pack(msg)])


def receive(sock):
    client, *frames = sock.recv_multipart()
    return parse(frames, 1 << 20)


def wait_for(predicate, timeout=5.0):
    limit = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < limit
        time.sleep(0.01)


def block(gate, sock, rank=0):
    """Put request 0 of `rank` in the handler, where it waits for the gate."""
    send(sock, rank, 0)
    wait_for(lambda: gate.started == 1)


def release(gate):
    """Let what was sent meanwhile arrive (the worker takes it all in between two handler
    calls), then open the gate."""
    time.sleep(0.3)
    gate.open.set()


def test_ranks_are_served_in_turn_whoever_floods(served):
    gate, server, sock = served
    block(gate, sock)
    for i in range(1, 8):
        send(sock, 0, i)  # rank 0 floods
    send(sock, 1, 100)
    send(sock, 2, 200)
    release(gate)
    replies = [receive(sock).id for _ in range(10)]
    assert sorted(replies) == [*range(8), 100, 200]
    assert [rank for rank, _ in gate.order[:4]] == [0, 0, 1, 2]  # not behind rank 0's seven
    assert server.stats()["per_rank"] == {0: 8, 1: 1, 2: 1}


@pytest.mark.parametrize("served", [{"queue_bound": 2, "full_policy": "fail_fast"}], indirect=True)
def test_fail_fast_refuses_when_the_ranks_queue_is_full(served):
    gate, server, sock = served
    block(gate, sock)
    for i in range(1, 4):  # 2 queued, the 4th refused
        send(sock, 0, i)
    send(sock, 1, 10)  # another rank still gets in
    release(gate)
    replies = {msg.id: msg for msg in (receive(sock) for _ in range(5))}
    assert replies.pop(3).code == "queue_full"
    assert sorted(replies) == [0, 1, 2, 10] and {m.kind for m in replies.values()} == {"rep"}
    assert server.stats()["refused_queue_full"] == 1


@pytest.mark.parametrize("served", [{"queue_bound": 1, "hold_bound": 2}], indirect=True)
def test_wait_holds_in_order_then_refuses_past_the_hold_bound(served):
    gate, server, sock = served
    block(gate, sock)
    for i in range(1, 5):  # 1 queued, 2 held, the 5th refused
        send(sock, 0, i)
    release(gate)
    replies = [receive(sock) for _ in range(5)]
    assert [(m.id, m.kind) for m in replies if m.kind == "err"] == [(4, "err")]
    assert [m.id for m in replies if m.kind == "rep"] == [0, 1, 2, 3]
    assert gate.order == [(0, 0), (0, 1), (0, 2), (0, 3)]
    assert server.stats()["held_total"] == 2 and server.stats()["held"] == 0


@pytest.mark.parametrize("served", [{"queue_bound": 1}], indirect=True)
def test_requests_past_their_deadline_are_answered_timeout_not_run(served):
    gate, server, sock = served
    block(gate, sock)
    send(sock, 0, 1, deadline_s=0.1)
    send(sock, 0, 2, deadline_s=0.1)
    release(gate)
    replies = {msg.id: msg for msg in (receive(sock) for _ in range(3))}
    assert replies[0].kind == "rep" and replies[1].code == replies[2].code == "timeout"
    send(sock, 0, 3, deadline_s=-1)
    assert receive(sock).code == "timeout" and gate.order == [(0, 0)]


@pytest.mark.parametrize("served", [{"queue_bound": 1}], indirect=True)
def test_held_requests_expire_while_others_are_served(served):
    gate, server, sock = served
    gate.open.set()
    sock.send_multipart(
        [
            b"c",
            *pack(
                Message("req", 0, 1, "m", time.time() + 10, body=encode({"i": 0, "sleep_s": 0.3}))
            ),
        ]
    )
    send(sock, 0, 1, deadline_s=10)
    send(sock, 0, 2, deadline_s=0.1)  # held behind request 1, expires during request 0
    send(sock, 0, 3, deadline_s=10)
    replies = {msg.id: msg for msg in (receive(sock) for _ in range(4))}
    assert {i: m.kind for i, m in replies.items()} == {0: "rep", 1: "rep", 2: "err", 3: "rep"}


def test_cancel_removes_a_queued_request(served):
    gate, server, sock = served
    block(gate, sock)
    send(sock, 0, 1)
    sock.send_multipart([b"c", *pack(Message("cancel", 1, 0))])
    release(gate)
    assert receive(sock).id == 0
    with pytest.raises(zmq.Again):
        sock.setsockopt(zmq.RCVTIMEO, 300)
        receive(sock)
    assert gate.order == [(0, 0)] and server.stats()["cancelled"] == 1


def test_pings_are_answered_between_requests(served):
    gate, server, sock = served
    send(sock, 0, 0)
    send(sock, 0, 1)
    wait_for(lambda: gate.started == 1)
    sock.send_multipart([b"", *pack(Message("ping"))])
    gate.open.set()
    replies = [receive(sock) for _ in range(3)]
    assert [m.kind for m in replies] == ["rep", "pong", "rep"]  # not behind the queue
    assert replies[1].info["pending"] == 1


def test_bad_messages_get_protocol_errors(served):
    gate, server, sock = served
    gate.open.set()
    sock.send_multipart([b"c", b"\x01junk"])
    assert receive(sock).code == "protocol"
    sock.send_multipart([b"c", envelope(1, 4, method=b"m", sizes=(5,)), b"{}{}{"])
    bad_body = receive(sock)
    assert (bad_body.id, bad_body.code) == (4, "protocol")
    sock.send_multipart([b"only-one-frame"])  # no envelope at all: dropped, counted
    send(sock, 0, 5)
    assert receive(sock).id == 5
    stats = server.stats()
    assert stats["refused_garbage"] == 2 and stats["refused_truncated"] == 1


def test_unknown_policy_is_refused(tmp_path):
    with pytest.raises(ValueError, match="policy 'drop'"):
        WorkerServer(Gate(), f"ipc://{tmp_path}/w.sock", full_policy="drop")


class Exits:
    """A handler that ends its thread the way a bad one might (SystemExit), then serves."""

    def __init__(self):
        self.calls = 0

    def setup(self):
        pass

    def ready(self):
        return {}

    def handle(self, method, payload, ctx):
        self.calls += 1
        if self.calls == 1:
            raise SystemExit(1)
        return payload


def test_a_handler_that_exits_is_the_callers_error_and_the_worker_serves_on(tmp_path):
    server = WorkerServer(Exits(), f"ipc://{tmp_path}/w.sock")
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.linger, sock.rcvtimeo = 0, 5000
    sock.connect(server.start())
    try:
        send(sock, 0, 1)
        reply = receive(sock)
        assert (reply.kind, reply.code) == ("err", "remote") and "SystemExit" in reply.error
        send(sock, 0, 2)
        assert receive(sock).kind == "rep" and server.threads[0].is_alive()
    finally:
        sock.close(0)
        server.stop()


def test_a_message_over_the_limit_in_all_frames_is_refused(served):
    gate, server, sock = served
    gate.open.set()
    limit = server.max_bytes
    sock.send_multipart([b"c", envelope(1, 3, sizes=(limit // 2,) * 3), *[bytes(limit // 2)] * 3])
    reply = receive(sock)
    assert (reply.id, reply.code) == (3, "protocol") and "oversized" in reply.error
    assert server.stats()["refused_oversized"] == 1
    send(sock, 0, 4)
    assert receive(sock).id == 4


def test_a_loop_that_fails_is_run_again_and_counted(served, monkeypatch):
    gate, server, sock = served
    gate.open.set()
    failing = {"left": 1}
    real = server._next

    def next_once():
        if failing["left"]:
            failing["left"] -= 1
            raise RuntimeError("a bug in the loop")
        return real()

    monkeypatch.setattr(server, "_next", next_once)
    send(sock, 0, 9)
    assert receive(sock).id == 9
    assert server.stats()["restarts"] == 1 and server.threads[0].is_alive()
