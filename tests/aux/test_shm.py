"""Big arrays between a rank and workers on one node go through reused shared-memory
segments: correct data, views handed out, segments reused, retired when a worker may still
touch them, and references that do not name our segments refused."""

from __future__ import annotations

import gc
import os
import time

import numpy as np
import pytest

from driver.aux import shm
from driver.aux.client import AuxClient
from driver.aux.errors import AuxTimeout
from driver.aux.shm_worker import Attached
from driver.messaging.envelope import WireError
from driver.messaging.payload import decode, encode, to_shm
from tests.aux.transport import processes, stack

pytestmark = pytest.mark.skipif(not shm.supported(), reason="no memfd or /proc here")
BIG = 3 << 20


def local_client(address, **kw):
    client = AuxClient("echo", 0, {address: 1}, deadline_s=20, **kw)
    limit = time.monotonic() + 20
    while not all(p.node for p in client.proxies.values()) and time.monotonic() < limit:
        client.call("echo", {})  # until the proxy's pong says where its workers run
        time.sleep(0.01)
    return client


def test_big_arrays_travel_in_shared_memory_and_segments_are_reused(tmp_path):
    data = np.random.default_rng(0).random(BIG // 4, dtype=np.float32)
    with stack(tmp_path, workers=1) as (address, _, _):
        client = local_client(address)
        pool = client.lender.pool
        out = client.call("echo", {"x": data, "small": np.arange(3)})
        assert np.array_equal(out["x"], data) and out["small"].tolist() == [0, 1, 2]
        assert out["x"].flags.writeable and pool.total >= 2 * BIG  # request + reply segment
        total, free = pool.total, len(pool.free)
        del out
        gc.collect()
        assert len(pool.free) == free + 1  # the reply's segment is back once its views die
        for _ in range(3):
            assert np.array_equal(client.call("echo", {"x": data})["x"], data)
        assert pool.total == total  # reused, not grown
        client.close()


def test_a_kept_view_retires_the_segment_so_the_handler_data_stays(tmp_path):
    first = np.full(BIG // 4, 1.0, np.float32)
    with stack(tmp_path, workers=1) as (address, _, workers):
        client = local_client(address)
        assert client.call("keep", {"x": first}) == {"ok": True}
        kept = workers[0].handler.kept["x"]
        for _ in range(3):  # segments of later requests must not be the kept one
            client.call("echo", {"x": np.full(BIG // 4, 7.0, np.float32)})
        assert np.array_equal(kept, first)
        client.close()


def test_a_request_given_up_retires_its_segments(tmp_path):
    with stack(tmp_path, workers=1) as (address, _, _):
        client = local_client(address)
        client.call("echo", {"x": np.zeros(BIG // 4, np.float32)})
        pool = client.lender.pool
        assert pool.total > 0 and len(pool.free) == 2  # the request's and the reply's
        with pytest.raises(AuxTimeout):
            client.call("echo", {"x": np.ones(BIG // 4, np.float32), "sleep_s": 1.0}, 0.2)
        assert pool.total == 0 and not pool.free  # the worker may still use both: retired
        client.close()


def test_workers_in_other_processes_read_the_segments(tmp_path):
    data = np.random.default_rng(1).integers(0, 1 << 30, BIG // 8, dtype=np.int64)
    with processes(tmp_path, workers=1) as address:
        client = local_client(address)
        for _ in range(2):
            assert np.array_equal(client.call("echo", {"x": data})["x"], data)
        assert client.lender.pool.total > 0
        client.close()


def test_without_shared_memory_big_arrays_are_frames(tmp_path):
    data = np.arange(BIG // 8, dtype=np.int64)
    with stack(tmp_path, workers=1) as (address, _, _):
        client = local_client(address, shm_bytes=0)
        assert np.array_equal(client.call("echo", {"x": data})["x"], data)
        assert client.lender.pool is None
        client.close()


def test_references_that_are_not_our_segments_are_refused(tmp_path):
    seg = shm.Segment(1 << 20, 1)
    body = to_shm(encode({"x": np.zeros(1 << 18, np.float32)}), seg.place, 1)
    with pytest.raises(WireError, match="shared memory where none"):
        decode(body)  # a worker or client that offered none
    attached = Attached()
    ref = seg.ref(0)
    assert len(attached.segment(ref)) == 1 << 20
    (tmp_path / "f").write_bytes(b"x" * 4096)
    fd = os.open(tmp_path / "f", os.O_RDWR)
    try:
        bad = [
            ["t1", os.getpid(), fd, os.fstat(fd).st_ino, 0],  # a file, not a segment
            ["t2", os.getpid(), seg.fd, ref[3] + 1, 0],  # another inode
            ["t3", os.getpid(), 10_000, 1, 0],  # no such fd
            ["t4", "pid", seg.fd, ref[3], 0],
            ["t5", os.getpid(), seg.fd],
        ]
        for wrong in bad:
            with pytest.raises(ValueError):
                attached.segment(wrong)
    finally:
        os.close(fd)
    lease = shm.Lease(attached.segment(ref))
    with pytest.raises(ValueError, match="outside"):
        lease.view((1 << 20) - 8, 16)
    attached.close()
    seg.close()


def test_an_echoed_array_is_read_where_it_was_sent_and_kept_ones_are_retired(tmp_path):
    data = np.random.default_rng(2).random(BIG // 4, dtype=np.float32)
    with stack(tmp_path, workers=1) as (address, _, workers):
        client = local_client(address)
        pool = client.lender.pool
        out = client.call("echo", {"x": data})["x"]  # no copy at the worker: a view of ours
        assert np.array_equal(out, data) and pool.total >= 2 * BIG and len(pool.free) == 1
        del out
        gc.collect()
        assert len(pool.free) == 2  # the request's segment is back once the reply is gone
        total = pool.total
        out = client.call("hold", {"x": data})["x"]  # the handler keeps what it echoes
        del out
        gc.collect()
        assert pool.total < total  # so that segment is retired, not reused
        for _ in range(2):
            client.call("echo", {"x": np.zeros_like(data)})
        assert np.array_equal(workers[0].handler.kept["x"], data)
        client.close()


def test_two_clients_of_one_process_never_share_a_token():
    """A worker caches mappings by token: two pools (two clients) must name theirs apart."""
    a, b = shm.Pool(1 << 24), shm.Pool(1 << 24)
    first, second = a.take(1 << 20), b.take(1 << 20)
    try:
        assert first.token != second.token
    finally:
        for seg in (first, second):
            seg.close()


def test_a_segment_is_checked_before_it_is_mapped(monkeypatch):
    seg = shm.Segment(1 << 20, 1)
    attached = Attached(max_segment=1 << 19)  # smaller than the segment
    mapped = []
    monkeypatch.setattr("driver.aux.shm_worker.mmap.mmap", lambda *a, **k: mapped.append(a))
    with pytest.raises(ValueError, match="limit"):
        attached.segment(seg.ref(0))
    assert mapped == []  # refused before any page of it was mapped (and so allocated)
    seg.close()


def test_a_segment_that_could_shrink_under_a_mapping_is_refused():
    fd = os.memfd_create(f"{shm.PREFIX}unsealed", os.MFD_CLOEXEC)  # a peer's, unsealed
    os.ftruncate(fd, 1 << 20)
    try:
        with pytest.raises(ValueError, match="sealed"):
            Attached().segment(["u", os.getpid(), fd, os.fstat(fd).st_ino, 0])
    finally:
        os.close(fd)
    seg = shm.Segment(1 << 20, 2)
    with pytest.raises(OSError):
        os.ftruncate(seg.fd, 4096)  # ours are sealed against it
    seg.close()
