"""What a receiver bounds before it trusts a message (driver.messaging): JSON depth before
parsing, every parse error a refusal, a whole message's budget over all its frames, a
serving loop that fails run again, peers checked at the handshake."""

from __future__ import annotations

import threading
import time

import pytest
import zmq

from driver.messaging import wire
from driver.messaging.limits import MAX_DEPTH, Ledger, WireError, depth, loads, too_deep
from driver.messaging.multipart import Oversized, recv_bounded
from driver.messaging.serving import supervise
from driver.messaging.zap import Gate, plain_password
from tests.aux.transport import envelope


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1", 0),
        ("[]", 1),
        ('{"a": [1, {"b": []}]}', 4),
        ('["[[[[", "\\"[[["]', 1),  # brackets in strings, an escaped quote
        ("[" * 300 + "]" * 300, 300),
        ("[[]][[[]]]", 3),
    ],
)
def test_depth_counts_brackets_outside_strings(text, expected):
    assert depth(text) == expected
    assert too_deep(text) == (expected > MAX_DEPTH)


@pytest.mark.parametrize(
    "text",
    [
        "[" * 5000 + "]" * 5000,  # ~10 KB: a RecursionError in the parser, unbounded
        '{"a":' * 2000 + "1" + "}" * 2000,
        "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1),
        '{"x": ' + "7" * 6000 + "}",  # an int over Python's digit limit
        "[1, 2",
        "\udcff",
    ],
)
def test_anything_wrong_with_json_is_a_garbage_refusal(text):
    with pytest.raises(WireError) as caught:
        loads(text)
    assert caught.value.reason == "garbage"


def test_json_at_the_depth_limit_parses():
    assert loads("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None


def test_deep_envelope_info_and_deep_bodies_are_refusals_not_crashes():
    info = b"[" * 5000 + b"]" * 5000
    env = envelope(sizes=(2,), lengths=(4, 0, 0, len(info)), text=info)
    with pytest.raises(WireError, match="garbage"):
        wire.parse([env, b"{}"], 1 << 20)
    body = b'{"p":' + b"[" * 50_000 + b"]" * 50_000 + b',"a":[]}'
    with pytest.raises(WireError, match="nested deeper"):
        wire.decode([body])


def test_a_torch_dtype_header_names_no_module_attribute():
    header = b'{"p":{"$nd":0},"a":[{"t":"<u2","s":[2],"o":"C","k":"torch","td":"onnx"}]}'
    with pytest.raises(WireError, match="torch dtype"):
        wire.decode([header, bytes(4)], torch=True)


@pytest.fixture
def pair():
    ctx = zmq.Context.instance()
    server, client = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
    server.linger = client.linger = 0
    port = server.bind_to_random_port("tcp://127.0.0.1")
    client.connect(f"tcp://127.0.0.1:{port}")
    yield server, client
    server.close(0)
    client.close(0)


def recv(sock, budget, frames=16):
    assert sock.poll(5000)
    return recv_bounded(sock, budget, frames, zmq.NOBLOCK)


def test_a_message_over_the_budget_in_all_is_let_go_and_the_next_one_is_whole(pair):
    server, client = pair
    client.send_multipart([b"env", *(bytes(400) for _ in range(4))])  # each under 1000
    client.send_multipart([b"env", b"next"])
    with pytest.raises(Oversized) as caught:
        recv(server, 1000)
    assert caught.value.nbytes >= 1603 and caught.value.count == 6  # routing id + 5 frames
    assert [bytes(f) for f in caught.value.head[1:]] == [b"env"]
    assert [bytes(f) for f in recv(server, 1000)[1:]] == [b"env", b"next"]


def test_too_many_frames_are_let_go(pair):
    server, client = pair
    client.send_multipart([b"x"] * 40)
    with pytest.raises(Oversized):
        recv(server, 1 << 20, frames=32)
    client.send_multipart([b"y"])
    assert [bytes(f) for f in recv(server, 1 << 20)[1:]] == [b"y"]


def test_a_failing_loop_is_reported_and_run_again_until_it_returns():
    calls, reported = [], []

    def loop():
        calls.append(1)
        if len(calls) < 3:
            raise RecursionError("boom") if len(calls) == 1 else SystemExit(3)

    thread = threading.Thread(target=supervise, args=(loop, lambda: True, reported.append, "t"))
    thread.start()
    thread.join(10)
    assert len(calls) == 3 and [type(e) for e in reported] == [RecursionError, SystemExit]


@pytest.mark.parametrize("err", [KeyboardInterrupt(), SystemExit(2)])
def test_ctrl_c_and_an_exit_in_the_main_thread_end_it(err):
    def loop():
        raise err

    with pytest.raises(type(err)):
        supervise(loop, lambda: True, lambda e: None, "test")


def test_a_loop_that_fails_while_stopping_is_not_run_again():
    running = threading.Event()
    running.set()

    def loop():
        running.clear()
        raise RuntimeError("on the way out")

    reported = []
    supervise(loop, running.is_set, reported.append, "test")
    assert reported == []


def test_the_gate_admits_the_password_and_counts_the_rest():
    ctx = zmq.Context()
    gate = Gate(ctx, plain_password("s3cret", b"worker"))
    server = ctx.socket(zmq.ROUTER)
    server.linger, server.plain_server = 0, True
    port = server.bind_to_random_port("tcp://127.0.0.1")
    clients = []
    for password in (b"wrong", b"s3cret"):
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.linger, sock.plain_username, sock.plain_password = 0, b"u", password
        sock.connect(f"tcp://127.0.0.1:{port}")
        sock.send(password)
        clients.append(sock)
    got, deadline = [], time.monotonic() + 10
    while not got and time.monotonic() < deadline:
        if gate.sock.poll(10):
            gate.answer()
        if server.poll(10):
            frames = server.recv_multipart(copy=False)
            got.append((frames[1].bytes, frames[1].get("User-Id")))
    assert got == [(b"s3cret", "worker")] and gate.refused >= 1
    for sock in clients:
        sock.close(0)
    server.close(0)
    gate.close()
    ctx.term()


def test_the_ledger_keeps_the_newest_peers():
    ledger = Ledger(max_peers=2)
    for peer in (b"a", b"b", b"a", b"c"):
        ledger.refuse(peer, "garbage")
    ledger.refuse(None, "oversized")
    stats = ledger.stats()
    assert stats["refused"] == {"garbage": 4, "oversized": 1}
    assert stats["refused_peers"] == {b"a".hex(): 2, b"c".hex(): 1}
