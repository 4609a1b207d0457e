"""A proxy facing garbage, truncated and oversized frames: each refused with an error reply
(or, over the frame limit, cut off before it is read), counted, and the proxy stays up."""

from __future__ import annotations

import random
import time

import pytest
import zmq

from driver.aux.client import AuxClient
from driver.messaging.envelope import MAX_FRAMES, Message, pack, parse
from driver.messaging.payload import encode
from tests.aux.transport import envelope, stack

LIMIT = 1 << 16


@pytest.fixture
def proxy(tmp_path):
    with stack(tmp_path, workers=1, proxy_kw={"max_message_bytes": LIMIT}) as running:
        yield running


@pytest.fixture
def raw(proxy):
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 5000)
    sock.connect(proxy[0])
    yield sock
    sock.close(0)


def exchange(sock, frames):
    if frames is not None:
        sock.send_multipart(frames)
    while True:
        reply = parse(sock.recv_multipart(), LIMIT)
        if reply.kind != "pong":  # the proxy announces changes in its live workers
            return reply


def still_serves(address):
    client = AuxClient("echo", 0, {address: 1}, deadline_s=10)
    try:
        return client.call("echo", {"ok": True}) == {"ok": True}
    finally:
        client.close()


@pytest.mark.parametrize(
    ("frames", "reason"),
    [
        ([b"\x00garbage"], "garbage"),
        ([b""], "garbage"),
        ([b'{"v": 1, "k": "req"', b"x"], "garbage"),  # a version 1 (JSON) envelope
        ([envelope(sizes=(1,))[:30], b"x"], "garbage"),  # cut mid-envelope
        ([envelope(sizes=(2, 10)), b"{}"], "truncated"),  # a frame missing
        ([envelope(sizes=(10,)), b"{}"], "truncated"),  # a frame cut short
        ([envelope(sizes=(LIMIT + 1,)), b"{}"], "oversized"),  # declared too big
        ([envelope(count=MAX_FRAMES + 1)], "garbage"),
        (
            [
                envelope(sizes=(2,), lengths=(4, 0, 0, 10_000), text=b"[" * 5000 + b"]" * 5000),
                b"{}",
            ],
            "garbage",
        ),  # info nested 5,000 deep: refused before it is parsed
        ([envelope(sizes=(LIMIT // 2,) * 3), *[bytes(LIMIT // 2)] * 3], "oversized"),
    ],
)
def test_bad_messages_get_an_error_reply_and_are_counted(proxy, raw, frames, reason):
    address, server, _ = proxy
    reply = exchange(raw, frames)
    assert reply.kind == "err" and reply.code == "protocol" and reason in reply.error
    assert server.stats()["refused"] == {reason: 1}
    assert still_serves(address)


def test_a_refusal_names_the_request_id_when_it_can(proxy, raw):
    reply = exchange(raw, [envelope(sizes=(10,)), b"{}"])
    assert reply.id == 9


def test_a_garbage_body_is_refused_by_the_worker(proxy, raw):
    address, _, workers = proxy
    reply = exchange(raw, [envelope(sizes=(6,)), b"not{js"])
    assert reply.kind == "err" and reply.code == "protocol" and reply.id == 9
    assert workers[0].stats()["refused_garbage"] == 1 and still_serves(address)


def test_a_frame_over_the_limit_is_cut_off_before_it_is_read(proxy, raw):
    address, server, _ = proxy
    raw.send_multipart([envelope(sizes=(4 * LIMIT,)), b"x" * (4 * LIMIT)])
    with pytest.raises(zmq.Again):  # no reply: the connection is dropped by ZeroMQ
        raw.setsockopt(zmq.RCVTIMEO, 1000)
        raw.recv_multipart()
    assert server.stats()["rank_disconnects"] >= 1
    assert still_serves(address)


def test_a_rank_cannot_send_replies_or_pongs(proxy, raw):
    _, server, _ = proxy
    reply = exchange(raw, [envelope(2, 3, sizes=(2,)), b"{}"])
    assert reply.code == "protocol" and reply.id == 3 and server.stats()["refused"] == {"kind": 1}


def test_random_frames_never_take_the_proxy_down(proxy, raw):
    address, server, _ = proxy
    rng = random.Random(14)
    for _ in range(200):
        frames = [rng.randbytes(rng.randint(0, 64)) for _ in range(rng.randint(1, 4))]
        assert exchange(raw, frames).code == "protocol"
    assert sum(server.stats()["refused"].values()) == 200
    assert still_serves(address)


def request(rid, payload, deadline_s=10.0):
    body = encode(payload)
    return pack(Message("req", rid, 0, "echo", time.time() + deadline_s, body=body))


def test_a_rank_holding_its_share_of_the_proxy_is_answered_queue_full(tmp_path):
    kw = {"proxy_kw": {"max_message_bytes": LIMIT, "max_client_bytes": 8192}}
    with stack(tmp_path, workers=1, **kw) as (address, server, _):
        raw = zmq.Context.instance().socket(zmq.DEALER)
        raw.linger, raw.rcvtimeo = 0, 5000
        raw.connect(address)
        try:
            raw.send_multipart(request(1, {"sleep_s": 0.5, "pad": "x" * 5000}))
            raw.send_multipart(request(2, {"pad": "x" * 5000}))
            replies = [exchange(raw, None) for _ in range(2)]
            assert [(r.id, r.kind, r.code) for r in replies] == [
                (2, "err", "queue_full"),
                (1, "rep", ""),
            ]
            raw.send_multipart(request(3, {"pad": "x" * 5000}))  # its share is free again
            assert exchange(raw, None).kind == "rep" and server.stats()["refused"] == {
                "rank_full": 1
            }
        finally:
            raw.close(0)


def test_a_replayed_request_id_in_flight_is_dropped(tmp_path):
    with stack(tmp_path, workers=1) as (address, server, _):
        raw = zmq.Context.instance().socket(zmq.DEALER)
        raw.linger, raw.rcvtimeo = 0, 2000
        raw.connect(address)
        try:
            frames = request(5, {"sleep_s": 0.3})
            raw.send_multipart(frames)
            raw.send_multipart(frames)
            assert exchange(raw, None).id == 5
            with pytest.raises(zmq.Again):
                exchange(raw, None)
            assert server.stats()["refused"] == {"replay": 1}
        finally:
            raw.close(0)


def test_a_proxy_loop_that_fails_is_run_again_and_counted(proxy, monkeypatch):
    address, server, _ = proxy
    failing = {"left": 1}
    real = server._heartbeat

    def beat_once():
        if failing["left"]:
            failing["left"] -= 1
            raise RuntimeError("a bug in the loop")
        real()

    monkeypatch.setattr(server, "_heartbeat", beat_once)
    time.sleep(1.0)
    assert server.stats()["restarts"] == 1 and still_serves(address)
