"""Kill a worker and a proxy under load (real processes): every request gets a reply or a
typed AuxError, none is lost; ranks route around the dead proxy and back when it returns,
and a proxy picks its worker back up when it returns on the same address."""

from __future__ import annotations

import os
import signal

import pytest

from driver.aux.client import AuxClient
from tests.aux.transport import SPAWN, Load, Processes, serve_worker, wait_for


class Cluster(Processes):
    """Worker and proxy processes: two workers, two proxies in front of both."""

    def __init__(self, tmp_path):
        super().__init__(tmp_path)
        self.workers = [self.start_worker(f"ipc://{tmp_path}/w{i}.sock") for i in range(2)]
        self.proxies = [self.start_proxy(name, self.workers) for name in ("p0", "p1")]


@pytest.fixture
def cluster(tmp_path):
    running = Cluster(tmp_path)
    yield running
    running.close()


def test_kill_a_worker_then_a_proxy_under_load(cluster):
    proxies = {address: 2 for address in cluster.proxies}
    client = AuxClient("echo", 0, proxies, deadline_s=10, retries=2, heartbeat_s=0.2)
    weights = lambda: {a: p["weight"] for a, p in client.stats()["proxies"].items()}  # noqa: E731
    wait_for(lambda: set(weights().values()) == {2})
    load = Load(client)
    try:
        exercise(cluster, client, load, weights)
    finally:
        sent, replies, errors = load.stop()
        client.close()

    assert not load.untyped
    assert sent == replies + errors  # every request answered or refused with a type
    assert replies > 400 and errors <= sent // 20
    assert set(load.errors) <= {"unavailable", "timeout"}
    stats = client.stats()
    assert stats["sent"] >= sent and stats["inflight"] == 0


def exercise(cluster, client, load, weights):
    wait_for(lambda: load.replies > 100)

    cluster.kill(cluster.workers[0])  # both proxies lose it at once
    wait_for(lambda: set(weights().values()) == {1})
    before = load.replies
    wait_for(lambda: load.replies > before + 100)  # served by the other worker meanwhile

    cluster.start_worker(cluster.workers[0])  # back on the same address
    wait_for(lambda: set(weights().values()) == {2})

    cluster.kill("p0")  # ranks route around it
    wait_for(lambda: weights()[cluster.proxies[0]] == 0)
    before = load.replies
    wait_for(lambda: load.replies > before + 100)

    cluster.start_proxy("p0", cluster.workers, bind=cluster.proxies[0])  # and back to it
    wait_for(lambda: weights()[cluster.proxies[0]] == 2)
    before = load.replies
    wait_for(lambda: load.replies > before + 100)


@pytest.mark.parametrize("policy", ["retry", "error"])
def test_requests_on_a_killed_worker_follow_the_services_policy(tmp_path, policy):
    from driver.aux.errors import AuxUnavailable
    from driver.aux.proxy import ProxyServer

    stop = str(tmp_path / "stop")
    workers = [f"ipc://{tmp_path}/w{i}.sock" for i in range(2)]
    procs = [
        SPAWN.Process(target=serve_worker, args=(address, stop, 0.0), daemon=True)
        for address in workers
    ]
    for proc in procs:
        proc.start()
    proxy = ProxyServer("echo", workers, on_worker_loss=policy)
    client = AuxClient("echo", 0, {proxy.start(): 2}, deadline_s=20, retries=0)
    try:
        wait_for(lambda: proxy.live_workers() == 2)
        futures = [client.submit("sleep", {"sleep_s": 1.0, "i": i}) for i in range(4)]
        wait_for(lambda: proxy.stats()["forwarded"] == 4)
        os.kill(procs[0].pid, signal.SIGKILL)  # holds two of them (round robin)
        outcomes = []
        for future in futures:
            try:
                outcomes.append(future.result()["i"])
            except AuxUnavailable:
                outcomes.append("unavailable")
        stats = proxy.stats()
    finally:
        client.close()
        proxy.stop()
        open(stop, "w").close()
        for proc in procs:
            proc.join(10)
    assert stats["worker_lost"] == 1 and stats["live_workers"] == 1
    if policy == "retry":  # re-sent to the live worker
        assert sorted(outcomes) == [0, 1, 2, 3] and stats["retried"] == 2
    else:  # answered at once with a typed error
        assert outcomes.count("unavailable") == 2 and stats["lost"] == 2
