"""A draining Ray node is a termination notice for each rank on it (driver.channel.drain):
the rank's `hello` records its Ray node, the driver's watcher asks the GCS which nodes are
draining and leaves `terminating` for their ranks. The slow test drains a real node of a
Ray cluster through the GCS, as `ray start --block` does when its pod gets SIGTERM."""

from __future__ import annotations

import logging
import time

import pytest

from driver.channel.drain import DrainWatcher
from driver.channel.state import RunChannel, valid_node_id

A, B = "a1" * 28, "b2" * 28  # two Ray node ids (56 hex digits)
HOST = {"pod": "p", "node": "n"}


@pytest.mark.parametrize("node", ["", A, "0123abcdef"])
def test_a_ray_node_id_is_hex(node):
    assert valid_node_id(node) == node


@pytest.mark.parametrize("node", [None, 7, "A1", "zz", "a" * 65, " a1", ["a1"]])
def test_anything_else_is_refused(node):
    with pytest.raises(ValueError, match="ray_node"):
        valid_node_id(node)


def channel_of(placed: dict[int, str]) -> RunChannel:
    state = RunChannel()
    for rank, node in placed.items():
        state.start(rank)
        state.hello(rank, HOST, node)
    return state


def test_the_ranks_on_a_node_are_those_whose_newest_start_was_there():
    state = channel_of({0: A, 1: A, 2: B, 3: ""})  # rank 3 from an older worker: no node
    assert state.ranks_on([A]) == [0, 1] and state.ranks_on([B, "c3"]) == [2]
    state.hello(1, HOST, B)  # rank 1 started again, on B
    assert state.ranks_on([A]) == [0] and state.ranks_on([B]) == [1, 2]
    assert state.ranks_on([]) == []


def test_a_hello_from_an_older_worker_still_works():
    state = RunChannel()
    assert state.hello(0, HOST) == 0 and state.ranks_on([""]) == []


def test_a_poll_tells_the_ranks_on_draining_nodes_that_their_pods_are_ending():
    state = channel_of({0: A, 1: A, 2: B, 3: B})
    draining: list[str] = []
    watcher = DrainWatcher(state, lambda: draining)
    assert watcher.poll() == [] and state.notice()["pods"] is None
    draining.append(B)
    before = time.time()
    assert watcher.poll() == [2, 3]
    assert state.notice([0, 1])["pods"] is None
    assert before <= state.notice([3])["pods"] <= time.time()
    first = state.notice([2])["pods"]
    assert watcher.poll() == [2, 3] and state.notice([2])["pods"] == first  # the first stays


def test_a_rank_started_again_after_the_drain_is_told_again():
    state = channel_of({0: A})
    watcher = DrainWatcher(state, lambda: [A])
    watcher.poll()
    time.sleep(0.01)
    state.start(0)  # a new process for rank 0 (still on the draining node)
    state.hello(0, HOST, A)
    assert state.notice([0])["pods"] is None  # the old notice was its old process's
    watcher.poll()
    assert state.notice([0])["pods"] is not None


def test_an_unreadable_gcs_is_logged_once_and_looked_at_again(caplog):
    state = channel_of({0: A})
    answers = [ConnectionError("gcs down"), ConnectionError("gcs down"), [A]]

    def read():
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    watcher = DrainWatcher(state, read)
    with caplog.at_level(logging.WARNING, logger="driver.channel"):
        assert watcher.poll() == [] and watcher.poll() == []
        assert watcher.poll() == [0]
    lines = [r.getMessage() for r in caplog.records if "cannot read" in r.getMessage()]
    assert len(lines) == 1 and "gcs down" in lines[0] and watcher.failures == 2


def test_the_thread_polls_until_closed():
    state = channel_of({5: A})
    watcher = DrainWatcher(state, lambda: [A], every_s=0.01).start()
    try:
        deadline = time.monotonic() + 30
        while state.notice([5])["pods"] is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert state.notice([5])["pods"] is not None
    finally:
        watcher.close()
    assert not watcher._thread.is_alive()


class Rank:
    """Stands in for a training worker: a Ray actor that says its node (as `hello` does)."""

    def node(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()


@pytest.mark.slow
def test_a_node_drained_through_the_gcs_is_seen_and_its_ranks_told():
    """A head and one worker node running an actor (a rank: an idle node would just go);
    the worker node is drained with reason preemption and a deadline a minute ahead (what
    Ray's SIGTERM handler of `ray start --block` asks)."""
    import ray
    from ray._raylet import GcsClient
    from ray.cluster_utils import Cluster
    from ray.core.generated import autoscaler_pb2
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from driver.channel.drain import gcs_draining

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    worker = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    try:
        node = worker.node_id
        on_node = NodeAffinitySchedulingStrategy(node, soft=False)
        rank1 = ray.remote(num_cpus=1)(Rank).options(scheduling_strategy=on_node).remote()
        state = channel_of({0: cluster.head_node.node_id, 1: ray.get(rank1.node.remote())})
        read = gcs_draining()
        assert set(read()) == set()
        gcs = GcsClient(address=cluster.address)
        reason = autoscaler_pb2.DrainNodeReason.Value("DRAIN_NODE_REASON_PREEMPTION")
        accepted, _ = gcs.drain_node(
            node, reason, "pod terminating", int(time.time() * 1000) + 60_000
        )
        assert accepted
        assert set(read()) == {node}
        assert DrainWatcher(state, read).poll() == [1]
        assert state.notice([1])["pods"] is not None and state.notice([0])["pods"] is None
    finally:
        ray.shutdown()
        cluster.shutdown()


def test_without_a_gcs_client_the_run_goes_on_unwatched(monkeypatch, caplog):
    from driver.channel import drain

    def no_client():
        raise ConnectionError("no gcs")

    monkeypatch.setattr(drain, "gcs_draining", no_client)
    with caplog.at_level(logging.WARNING, logger="driver.channel"):
        watcher = drain.watch_drains(channel_of({0: A}), every_s=3600)
    try:
        assert watcher.poll() == [] and "no gcs" in caplog.text
    finally:
        watcher.close()
