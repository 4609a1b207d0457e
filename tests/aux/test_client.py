"""AuxClient against real workers and a proxy (threads, real sockets): calls, futures,
deadlines, cancellation, typed errors, thread safety."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import zmq

from driver.aux.client import AuxClient
from driver.aux.errors import (
    AuxCancelled,
    AuxProtocolError,
    AuxQueueFull,
    AuxRemoteError,
    AuxTimeout,
    AuxUnavailable,
)
from tests.aux.transport import stack


@pytest.fixture
def service(tmp_path):
    with stack(tmp_path, workers=2) as (address, proxy, workers):
        client = AuxClient("echo", 3, {address: 2}, deadline_s=10)
        yield client, proxy, workers
        client.close()


def test_call_round_trips_json_and_arrays(service):
    client, proxy, workers = service
    array = np.random.default_rng(0).random((64, 32), dtype=np.float32)
    reply = client.call("echo", {"x": array, "meta": {"step": 4, "tags": ["a", "b"]}})
    assert np.array_equal(reply["x"], array) and reply["meta"] == {"step": 4, "tags": ["a", "b"]}
    assert client.call("pid", {})["rank"] == 3
    assert proxy.live_workers() == 2


def test_requests_are_spread_over_workers_round_robin(service):
    client, _, workers = service
    futures = [client.submit("echo", {"i": i}) for i in range(40)]
    assert [f.result()["i"] for f in futures] == list(range(40))
    served = [w.stats()["served"] for w in workers]
    assert sum(served) == 40 and min(served) >= 15


def test_handler_errors_come_back_typed(service):
    client, _, workers = service
    with pytest.raises(AuxRemoteError, match="echo: ValueError: no such token") as caught:
        client.call("boom", {})
    assert caught.value.code == "remote"
    assert sum(w.stats()["errors"] for w in workers) == 1


def test_deadline_raises_timeout_and_the_client_keeps_working(service):
    client, _, _ = service
    with pytest.raises(AuxTimeout):
        client.call("sleep", {"sleep_s": 1.0}, deadline_s=0.2)
    assert client.call("echo", {"ok": 1}) == {"ok": 1}
    assert client.stats()["errors"] == {"timeout": 1}


def test_cancel_a_queued_request(service):
    client, _, _ = service
    blockers = [client.submit("sleep", {"sleep_s": 0.5}) for _ in range(2)]
    queued = client.submit("echo", {"late": True})
    assert queued.cancel() and queued.done() and not queued.cancel()
    with pytest.raises(AuxCancelled):
        queued.result()
    assert all(f.result() == {"sleep_s": 0.5} for f in blockers)


def test_unsendable_or_oversized_payloads_are_refused_locally(tmp_path):
    with stack(tmp_path, workers=1) as (address, _, _):
        client = AuxClient("echo", 0, {address: 1}, max_message_bytes=1 << 10)
        with pytest.raises(AuxProtocolError, match="over the limit"):
            client.call("echo", {"x": np.zeros(1 << 10, np.uint8)})
        with pytest.raises(AuxProtocolError, match="set is not JSON-able"):
            client.call("echo", {"x": {1, 2}})
        assert client.call("echo", {"x": 1}) == {"x": 1}
        client.close()


def test_fail_fast_queue_full_is_typed(tmp_path):
    kw = {"queue_bound": 1, "full_policy": "fail_fast"}
    with stack(tmp_path, workers=1, **kw) as (address, _, _):
        client = AuxClient("echo", 0, {address: 1})
        futures = [client.submit("sleep", {"sleep_s": 0.2}) for _ in range(4)]
        outcomes = []
        for future in futures:
            try:
                outcomes.append(future.result() == {"sleep_s": 0.2})
            except AuxQueueFull:
                outcomes.append("full")
        assert outcomes.count(True) >= 1 and "full" in outcomes
        client.close()


def test_wait_policy_holds_until_room(tmp_path):
    with stack(tmp_path, workers=1, queue_bound=1) as (address, _, workers):
        client = AuxClient("echo", 0, {address: 1})
        futures = [client.submit("sleep", {"sleep_s": 0.05}) for _ in range(6)]
        assert all(f.result() == {"sleep_s": 0.05} for f in futures)
        assert workers[0].stats()["held_total"] >= 1
        client.close()


def test_no_proxy_answers_unavailable_by_the_deadline():
    client = AuxClient("echo", 0, {"tcp://127.0.0.1:1": 1}, deadline_s=0.3)
    started = time.monotonic()
    with pytest.raises(AuxUnavailable, match="no live proxy"):
        client.call("echo", {})
    assert time.monotonic() - started < 5
    client.close()
    with pytest.raises(AuxUnavailable, match="closed"):
        client.submit("echo", {})


def test_many_threads_share_one_client(service):
    client, _, _ = service
    results: dict[int, list] = {}

    def run(thread: int) -> None:
        results[thread] = [client.call("echo", {"t": thread, "i": i})["i"] for i in range(30)]

    threads = [threading.Thread(target=run, args=(t,)) for t in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == {t: list(range(30)) for t in range(6)}


def test_a_reply_over_the_limit_is_an_error_not_a_dropped_connection(tmp_path):
    with stack(tmp_path, workers=1, max_message_bytes=4096) as (address, _, _):
        client = AuxClient("echo", 0, {address: 1}, max_message_bytes=4096)
        with pytest.raises(AuxRemoteError, match="reply of 8.* bytes over the limit 4096"):
            client.call("zeros", {"n": 8192})
        assert client.call("zeros", {"n": 16}) == {"x": bytes(16)}
        assert client.stats()["resent"] == 0
        client.close()


def test_a_proxy_that_stops_answering_gets_weight_0_and_its_requests_move(tmp_path):
    mute = zmq.Context.instance().socket(zmq.ROUTER)  # connects, never answers
    mute.setsockopt(zmq.LINGER, 0)
    mute_address = f"tcp://127.0.0.1:{mute.bind_to_random_port('tcp://127.0.0.1')}"
    with stack(tmp_path, workers=1) as (address, _, _):
        proxies = {address: 1, mute_address: 1}
        client = AuxClient("echo", 0, proxies, retries=1, heartbeat_s=0.1, proxy_timeout_s=0.5)
        while not all(p["up"] for p in client.stats()["proxies"].values()):
            time.sleep(0.01)
        futures = [client.submit("echo", {"i": i}) for i in range(10)]
        assert [f.result(timeout=20)["i"] for f in futures] == list(range(10))
        stats = client.stats()
        assert stats["proxies"][mute_address]["weight"] == 0 and stats["errors"] == {}
        assert stats["resent"] == 5  # the mute one's share, re-sent to the live proxy
        assert client.call("echo", {"after": 1}) == {"after": 1}
        client.close()
    mute.close(0)
