"""The run's channel (driver/channel): the driver serves its RunChannel over ZeroMQ to the
workers; real sockets on the loopback address."""

from __future__ import annotations

import contextlib
import math
import threading
import time

import pytest
import zmq

from driver.channel import ChannelAddress, ChannelError, DriverChannel
from driver.channel.server import endpoint
from driver.channel.state import RunChannel
from driver.channel.stops import NoticePoll
from driver.messaging import wire


def test_a_worker_says_hello_sends_rows_and_the_driver_drains_them_in_order(channel, client):
    assert channel.address.endpoint.startswith("tcp://127.0.0.1:")  # loopback only
    channel.begin(3)  # attempts already in metrics.jsonl
    assert client.call("hello", 1, {"pod": "p", "node": "n"}, timeout_s=10) == 3
    for step in range(1, 4):
        client.send("push_many", [{"step": step, "loss": float("nan") if step == 2 else 1.5}])
    assert client.call("sync", timeout_s=10) is True  # after every message sent before it
    rows = channel.drain()
    assert [r["step"] for r in rows] == [1, 2, 3] and math.isnan(rows[1]["loss"])
    assert channel.all_hosts() == {1: {"pod": "p", "node": "n", "attempt": 3}}
    assert client.call("start", 1, timeout_s=10) == 0 and client.call("start", 1) == 1
    assert channel.restarts() == 1
    client.call("finish", {"ckpt_uri": "x"}, timeout_s=10)
    assert channel.final() == {"ckpt_uri": "x"}


def test_a_failure_record_reaches_the_driver(channel, client):
    record = {"error": "RuntimeError: x", "traceback": "T" * 100_000, "flight_recorder": None}
    client.call("fail", 1, record, timeout_s=10)
    assert channel.get_failures() == {1: record}


@pytest.mark.parametrize(
    ("method", "args", "expected"),
    [
        ("drain", (), "method: no method 'drain'"),  # the driver's, not a worker's
        ("preempt", (1.0,), "method: no method 'preempt'"),
        ("hello", (), "failed: TypeError"),  # a handler that raises
    ],
)
def test_a_worker_gets_only_its_methods(client, method, args, expected):
    with pytest.raises(ChannelError, match=expected):
        client.call(method, *args, timeout_s=10)
    assert client.call("sync", timeout_s=10) is True  # and the channel goes on


def test_a_peer_without_the_runs_token_is_turned_away_at_the_handshake(channel, client):
    stranger = ChannelAddress(channel.address.endpoint, "0" * 32).connect()
    try:  # the call is queued and never answered, or (the handshake refused already) not sent
        with pytest.raises(ChannelError, match="no answer|takes no more"):
            stranger.call("hello", 0, {}, timeout_s=0.5)
        deadline = time.monotonic() + 10
        while channel.refused["token"] < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        with contextlib.suppress(ChannelError):  # no connection to send on, usually
            stranger.send("push_many", [{"step": 1}])
        assert client.call("sync", timeout_s=10) is True
    finally:
        stranger.close()
    assert channel.refused["token"] >= 1 and channel.drain() == [] and channel.all_hosts() == {}
    assert channel.stats()["refused_peers"] == {}  # refused before it was a peer


def raw_socket(address: ChannelAddress, token: str | None = None) -> zmq.Socket:
    """A DEALER that speaks no protocol of ours (with the run's token when given)."""
    raw = zmq.Context.instance().socket(zmq.DEALER)
    raw.linger = 0
    if token is not None:
        raw.plain_username, raw.plain_password = b"worker", token.encode()
    raw.connect(address.endpoint)
    return raw


def test_a_message_without_the_runs_token_in_its_envelope_is_dropped(channel):
    raw = raw_socket(channel.address, channel.token)  # past the handshake, not the envelope
    try:
        body = wire.encode([0, {}])
        raw.send_multipart(wire.pack(wire.Message("req", id=1, method="hello", body=body)))
        deadline = time.monotonic() + 10
        while channel.refused["token"] < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        raw.close()
    assert channel.refused["token"] == 1 and channel.all_hosts() == {}
    assert sum(channel.stats()["refused_peers"].values()) == 1


def test_garbage_is_dropped_and_the_channel_serves_on(channel, client):
    raw = raw_socket(channel.address, channel.token)
    try:
        raw.send_multipart([b"\x02not an envelope"])
        raw.send_multipart([b"{}"])
        deadline = time.monotonic() + 10
        while sum(channel.refused.values()) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        raw.close()
    assert sum(channel.refused.values()) == 2 and "token" not in channel.refused
    assert client.call("sync", timeout_s=10) is True


def test_the_notice_poll_never_blocks_and_sees_a_preemption(channel, client):
    poll = NoticePoll(client, interval_s=0.0)
    assert poll() is None  # asked; the answer is not in yet or is "no notice"
    deadline = time.monotonic() + 10
    while poll._pending is not None and time.monotonic() < deadline:
        assert poll() is None
    channel.preempt(123.0)
    seen = None
    while seen is None and time.monotonic() < deadline:
        seen = poll()
    assert seen == 123.0


def test_two_threads_share_one_client(channel, client):
    """The metrics thread sends while the training thread calls: every row arrives and
    every answer reaches its own caller."""
    stop, trouble = threading.Event(), []

    def send(row):  # a full queue (the serving thread is slower than this loop) is waited out
        while True:
            try:
                return client.send("push_many", [row])
            except ChannelError as err:
                if "takes no more" not in str(err):
                    trouble.append(err)
                    raise
                time.sleep(0.01)

    def push():  # paced far below the queue's bound: the calls never find it full
        step = 0
        while not stop.is_set():
            step += 1
            send({"step": step})
            time.sleep(0.001)
        send({"step": -step})  # the count, last

    thread = threading.Thread(target=push)
    thread.start()
    try:
        answers = [client.call("start", 1, timeout_s=10) for _ in range(50)]
    finally:
        stop.set()
        thread.join()
    assert answers == list(range(50)) and trouble == []
    client.call("sync", timeout_s=10)
    steps = [row["step"] for row in channel.drain()]
    assert steps[:-1] == list(range(1, -steps[-1] + 1))


def test_a_reply_nobody_waits_for_is_dropped(client):
    late = wire.pack(wire.Message("rep", id=999, body=wire.encode(1)))
    client._take(late)
    assert client.replies == {}


def test_a_closed_channel_answers_nothing(channel, client):
    channel.close()
    with pytest.raises(ChannelError, match="no answer"):
        client.call("sync", timeout_s=0.3)
    client.send("push_many", [{"step": 1}])  # a send never raises for a gone driver


@pytest.mark.parametrize(
    ("host", "expected"),
    [("127.0.0.1", "tcp://127.0.0.1"), ("10.0.3.7", "tcp://10.0.3.7"), ("::1", "tcp://[::1]")],
)
def test_endpoints(host, expected):
    assert endpoint(host) == expected


def test_an_ipv6_channel_serves(tmp_path):
    served = DriverChannel.start(RunChannel(), "::1")
    try:
        worker = served.address.connect()
        assert served.address.endpoint.startswith("tcp://[::1]:")
        assert worker.call("sync", timeout_s=10) is True
        worker.close()
    finally:
        served.close()


def test_a_host_it_cannot_bind_is_an_error():
    with pytest.raises(zmq.ZMQError):
        DriverChannel.start(RunChannel(), "192.0.2.123")  # not an address of this machine


def test_a_gone_driver_never_blocks_a_sender():
    served = DriverChannel.start(RunChannel())
    worker = served.address.connect()
    served.close()
    try:
        with pytest.raises(ChannelError, match="takes no more messages"):
            for _ in range(100_000):  # past the high-water mark
                worker.send("push_many", [{"step": 1}])
        with pytest.raises(ChannelError, match="takes no more messages"):
            worker.request("notice")
        assert worker.waiting == set()  # a request that never left waits for nothing
    finally:
        worker.close()


class _OddState(RunChannel):
    def hello(self, rank, host):
        return {1, 2}  # not JSON: the reply cannot be encoded


def test_a_message_that_cannot_be_served_leaves_the_channel_serving():
    served = DriverChannel.start(_OddState())
    worker = served.address.connect()
    try:
        with pytest.raises(ChannelError, match="no answer"):
            worker.call("hello", 0, {}, timeout_s=0.5)
        assert served.refused["internal"] == 1
        assert worker.call("sync", timeout_s=10) is True
    finally:
        worker.close()
        served.close()


class _Full:
    def request(self, method):
        raise ChannelError(f"{method}: the driver takes no more messages")


def test_the_notice_poll_shrugs_off_a_driver_that_takes_no_more():
    assert NoticePoll(_Full(), interval_s=0.0)() is None  # the step goes on
