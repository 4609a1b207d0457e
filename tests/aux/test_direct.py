"""Calls to a worker on the caller's own node skip the proxy (`AuxClient(workers=...)`),
with every guarantee of the proxy path: real worker and proxy processes (or workers in
threads where a test reads their counters), IPC and TCP sockets.

The "other node" is a proxy process in front of another worker: the client calls its own
worker directly and the proxy for the rest (`routing.link_weights`); which worker served a
call is told by its process id (method "pid")."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import zmq

from driver.aux.client import AuxClient
from driver.aux.errors import AuxCancelled, AuxQueueFull, AuxTimeout, AuxUnavailable
from driver.aux.worker import WorkerServer
from driver.messaging.envelope import Message, pack, parse
from driver.messaging.payload import encode
from tests.aux.transport import Echo, Load, Processes, wait_for


@pytest.fixture
def nodes(tmp_path):
    """Worker `here` (this node) and worker `there` behind its proxy (the other node)."""
    procs = Processes(tmp_path)
    here = procs.start_worker(f"ipc://{tmp_path}/here.sock")
    there = procs.start_worker(f"ipc://{tmp_path}/there.sock")
    procs.here, procs.there, procs.proxy = here, there, procs.start_proxy("proxy", [there])
    yield procs
    procs.close()


def links(client) -> dict:
    return {a: (p["weight"], p["direct"]) for a, p in client.stats()["proxies"].items()}


def up(client) -> bool:
    return all(p["up"] for p in client.stats()["proxies"].values())


def pid_of(client, address) -> int:
    """The process id of the worker behind `address`, asked through that link alone."""
    solo = AuxClient("echo", 9, {} if address.startswith("ipc") else {address: 1},
                     workers=[address] if address.startswith("ipc") else [])  # fmt: skip
    try:
        return solo.call("pid", {})["pid"]
    finally:
        solo.close()


def test_a_call_to_this_nodes_worker_skips_the_proxy(nodes):
    client = AuxClient("echo", 0, {nodes.proxy: 1}, workers=[nodes.here], node_share=0.5)
    try:
        wait_for(lambda: up(client))
        # one worker of two for half the ranks: every call stays on this node
        assert links(client) == {nodes.here: (1, True), nodes.proxy: (0, False)}
        served = {client.call("pid", {})["pid"] for _ in range(30)}
        assert served == {pid_of(client, nodes.here)}
        big = np.random.default_rng(0).random(1 << 19)  # 4 MiB: through shared memory
        assert np.array_equal(client.call("echo", {"x": big})["x"], big)
        assert client.lender.pool.total > 0  # the worker's pong told it we share a node
        assert client.stats()["errors"] == {}
    finally:
        client.close()


def test_a_node_with_fewer_workers_than_its_share_sends_the_rest_to_the_proxies(nodes):
    # this node holds all the ranks but one worker of two: half the calls go to the other
    client = AuxClient("echo", 0, {nodes.proxy: 1}, workers=[nodes.here], node_share=1.0)
    try:
        # the proxy's weight comes with its first pong (its live workers), after it is up
        want = {nodes.here: (500, True), nodes.proxy: (500, False)}
        wait_for(lambda: up(client) and links(client) == want)
        pids = [client.call("pid", {})["pid"] for _ in range(40)]
        here, there = pid_of(client, nodes.here), pid_of(client, nodes.proxy)
        # Smooth weighted round robin splits them 20/20 while both links answer; a pong
        # that is late under load takes the direct link's weight away for a moment
        # (client_requests: `p.up and p.answering`), so a few calls may go the other way.
        assert pids.count(here) + pids.count(there) == 40
        assert 14 <= pids.count(here) <= 26
    finally:
        client.close()


def test_the_local_worker_dies_and_comes_back_under_load(nodes):
    client = AuxClient("echo", 0, {nodes.proxy: 1}, workers=[nodes.here], node_share=0.5,
                       deadline_s=10, retries=1, heartbeat_s=0.2)  # fmt: skip
    wait_for(lambda: up(client))
    here, there = pid_of(client, nodes.here), pid_of(client, nodes.proxy)
    load = Load(client, method="pid")
    try:
        wait_for(lambda: load.replies > 100)
        assert set(load.pids) == {here}  # all on this node
        nodes.kill(nodes.here)  # its requests in flight are re-sent to the other node
        wait_for(lambda: links(client)[nodes.here][0] == 0)
        before = load.pids.get(there, 0)
        wait_for(lambda: load.pids.get(there, 0) > before + 100)
        nodes.start_worker(nodes.here)  # back on the same address: ZeroMQ reconnects
        wait_for(lambda: links(client)[nodes.here][0] == 1)
        wait_for(lambda: len(load.pids) == 3 and max(load.pids.values()) > 0)
        reborn = (set(load.pids) - {here, there}).pop()
        before = load.pids[reborn]
        wait_for(lambda: load.pids[reborn] > before + 100)
    finally:
        sent, replies, errors = load.stop()
        client.close()
    assert not load.untyped and errors == 0 and sent == replies  # none lost, none failed
    assert client.stats()["resent"] >= 0 and client.stats()["inflight"] == 0


def test_without_retries_a_request_on_a_dead_local_worker_fails_typed(nodes):
    client = AuxClient("echo", 0, {}, workers=[nodes.here], deadline_s=30, retries=0)
    try:
        wait_for(lambda: up(client))
        future = client.submit("sleep", {"sleep_s": 10.0})
        wait_for(lambda: client.stats()["inflight"] == 1)
        nodes.kill(nodes.here)
        with pytest.raises(AuxUnavailable, match="worker .* disconnected in flight"):
            future.result(timeout=5)  # at once, not at the deadline
    finally:
        client.close()


class Gate(Echo):
    """Echo, and method "gate": holds the worker until `opened` is set."""

    def __init__(self):
        super().__init__()
        self.entered, self.opened = threading.Event(), threading.Event()
        self.order: list[int] = []

    def handle(self, method, payload, ctx):
        if method == "gate":
            self.entered.set()
            self.opened.wait(30)
        if method == "rank":  # the order in which ranks are served
            self.order.append(ctx.rank)
            return {"rank": ctx.rank}
        return super().handle(method, payload, ctx)


@pytest.fixture
def worker(tmp_path):
    """A worker in a thread (its counters readable here), called directly."""
    servers = []

    def start(handler=None, **kw):
        server = WorkerServer(handler or Echo(), f"ipc://{tmp_path}/w{len(servers)}.sock", **kw)
        servers.append(server)
        return server, server.start()

    yield start
    for server in servers:
        server.stop()


def test_deadlines_cancels_and_a_full_queue_directly(worker):
    gate = Gate()
    server, address = worker(gate, queue_bound=1, full_policy="fail_fast")
    client = AuxClient("echo", 3, {}, workers=[address], deadline_s=10)
    try:
        wait_for(lambda: up(client))
        with pytest.raises(AuxTimeout):
            client.call("sleep", {"sleep_s": 0.5}, deadline_s=0.2)
        busy = client.submit("gate", {"i": 0})
        assert gate.entered.wait(30)  # the worker is serving it; the next ones wait for it
        queued = client.submit("echo", {"i": 1})  # into rank 3's queue (bound 1)
        full = client.submit("echo", {"i": 2})  # over the bound: refused when taken in
        assert queued.cancel()
        with pytest.raises(AuxCancelled):
            queued.result()
        gate.opened.set()
        with pytest.raises(AuxQueueFull):
            full.result()
        assert busy.result() == {"i": 0}
        wait_for(lambda: server.stats()["cancelled"] == 1)  # taken out of the queue
        stats = server.stats()
        assert stats["refused_queue_full"] == 1 and stats["served"] == 2  # not the cancelled
    finally:
        client.close()


def test_ranks_calling_directly_are_served_in_turn(worker):
    """Rank 0 sends 40 requests and rank 1 five, each over its own direct link, while the
    worker is held: then it serves them rank by rank in turn (in arrival order rank 1 would
    wait for all 40)."""
    gate = Gate()
    server, address = worker(gate, queue_bound=64)
    flood = AuxClient("echo", 0, {}, workers=[address], deadline_s=30)
    calm = AuxClient("echo", 1, {}, workers=[address], deadline_s=30)
    try:
        wait_for(lambda: up(flood) and up(calm))
        held = flood.submit("gate", {})
        assert gate.entered.wait(30)
        futures = [flood.submit("rank", {}) for _ in range(40)]
        futures += [calm.submit("rank", {}) for _ in range(5)]
        wait_for(lambda: flood.stats()["sent"] == 41 and calm.stats()["sent"] == 5)
        time.sleep(0.5)  # delivered to the worker's socket (it takes none in while held)
        gate.opened.set()
        held.result()
        assert [future.result()["rank"] for future in futures] == [0] * 40 + [1] * 5
        assert gate.order[:10] == [0, 1] * 5 and set(gate.order[10:]) == {0}
    finally:
        flood.close()
        calm.close()


def test_a_direct_peer_is_held_to_a_ranks_share_and_its_replays_are_dropped(worker):
    """What a proxy enforces per rank, the worker enforces per direct peer: bytes and
    requests held there (`queue_full` beyond), and a request id in flight already."""
    gate = Gate()
    server, address = worker(gate, queue_bound=64, max_peer_bytes=20_000)
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(address)
    body = encode({"x": b"\0" * 8000})

    def send(rid, method="echo"):
        sock.send_multipart([b"", *pack(Message("req", rid, 5, method, 4e9, body=body))])

    try:
        send(0, "gate")
        assert gate.entered.wait(30)
        for rid in (1, 1, 2, 3, 4):  # 1 again is a replay; 3 and 4 are over 20,000 bytes
            send(rid)
        time.sleep(0.5)  # delivered to the worker's socket (it takes none in while held)
        gate.opened.set()
        replies = {}
        while len(replies) < 5:
            msg = parse(sock.recv_multipart()[1:], 1 << 20)
            replies[msg.id] = msg.code or msg.kind
        assert replies == {0: "rep", 1: "rep", 2: "rep", 3: "queue_full", 4: "queue_full"}
        stats = server.stats()
        assert stats["refused_replay"] == 1 and stats["refused_queue_full"] == 2
        assert server.books.peers == {}  # nothing left on the books
        client = AuxClient("echo", 5, {}, workers=[address])  # another peer: its own share
        assert client.call("echo", {"ok": 1}) == {"ok": 1}
        client.close()
    finally:
        sock.close(0)


def test_garbage_from_a_direct_peer_is_refused_and_the_worker_serves_on(worker):
    server, address = worker()
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(address)
    client = AuxClient("echo", 0, {}, workers=[address])
    try:
        for frames in ([b"", b"\x02\x01garbage"], [b""], [b"", b"[" * 10_000], [b"x" * 3]):
            sock.send_multipart(frames)
        threads = [threading.Thread(target=client.call, args=("echo", {"i": i})) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert client.stats()["replies"] == 4
        stats = server.stats()
        assert stats["refused_garbage"] + stats["refused_truncated"] >= 3
    finally:
        sock.close(0)
        client.close()
