"""The pipeline's queues carry typed frames, never pickle: what travels, what is refused,
and what a process of the same user writing into a queue's pipe gets (a refusal, never an
unpickled object); the placement record and batch specs read back only as plain data."""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import queue
import struct

import numpy as np
import pytest
import torch

from driver.data import codec
from driver.data.frames import FrameQueue, QueueCorrupt, pack, unpack
from driver.data.placement import Placed, dump_signature, load_signature, signature
from driver.data.staging import FAILED, OK, Staged, inbound, outbound, unsendable

CTX = mp.get_context("fork")


def test_a_record_is_a_json_head_and_typed_values():
    values = [{"x": np.arange(6, dtype=np.int16).reshape(2, 3)},
              torch.ones(2, dtype=torch.bfloat16), None, 1.5, "s", (True, b"raw")]  # fmt: skip
    head, out = unpack(pack(("batch", 1, 2, [3, 4]), values))
    assert head == ["batch", 1, 2, [3, 4]]  # the head is plain JSON: a tuple comes back a list
    assert np.array_equal(out[0]["x"], values[0]["x"]) and out[0]["x"].flags.writeable
    assert out[1].dtype == torch.bfloat16 and out[2:] == [None, 1.5, "s", (True, b"raw")]
    assert unpack(pack(7)) == (7, [])


@pytest.mark.parametrize("item", [{1: "int key"}, {"s": {1, 2}}, object(), np.array([None])])
def test_what_is_not_plain_data_cannot_be_put(item):
    with pytest.raises(TypeError):
        pack([0], [item])


def test_a_queue_between_processes_is_bounded_and_times_out():
    q = FrameQueue(CTX, maxsize=2)
    q.put(1, timeout=1)
    q.put([2], [("two",)], timeout=1)
    with pytest.raises(queue.Full):
        q.put(3, timeout=0.05)
    child = CTX.Process(target=_echo_one, args=(q,))
    child.start()
    child.join(30)
    assert child.exitcode == 0
    assert q.get(timeout=5) == ([2], [("two",)]) and q.get(timeout=5) == ([1], [])
    with pytest.raises(queue.Empty):
        q.get(timeout=0.05)
    q.close()


def _echo_one(q):
    head, _ = q.get(timeout=5)
    q.put([head], timeout=5)


def _pickle_bomb():
    return os.system, ("echo pwned",)


class _Evil:
    def __reduce__(self):
        return _pickle_bomb()


@pytest.mark.parametrize(
    "raw",
    [
        pickle.dumps(_Evil()),  # what a writer into a multiprocessing.Queue's pipe could send
        struct.pack("<I", 1) + struct.pack("<Q", 10) + b"short",
        struct.pack("<I", 1 << 30),
        struct.pack("<I", 1) + struct.pack("<Q", 8) + b"[" * 8,
        struct.pack("<I", 1) + struct.pack("<Q", 4000) + b"[" * 4000,  # nested too deep
        struct.pack("<I", 2) + struct.pack("<QQ", 2, 3) + b"[][0]",  # values that are no body
    ],
)
def test_a_foreign_write_into_a_queue_is_refused_not_unpickled(raw):
    q = FrameQueue(CTX, maxsize=4)
    q.writer.send_bytes(raw)  # as a process of the same user could, through /proc/<pid>/fd
    with pytest.raises(QueueCorrupt):
        q.get(timeout=5)
    q.close()


def test_a_message_longer_than_the_limit_is_refused_before_it_is_read():
    q = FrameQueue(CTX, maxsize=4, max_bytes=1024)
    q.put([0], [np.zeros(4096, np.uint8)], timeout=1)
    with pytest.raises(QueueCorrupt, match="bad message length"):
        q.get(timeout=5)
    q.close()


def test_sample_records_round_trip_and_unsendable_samples_fail_by_name():
    spec, _, _ = codec.encode({"x": np.zeros((2, 2), np.float32), "label": 3})
    results = [(0, 10, OK, Staged(spec)), (1, 11, FAILED, "fetch: IOError"), (2, 12, OK, {"a": 1}),
               (3, 13, OK, Placed())]  # fmt: skip
    records, values = unpack(pack(*outbound(results)))
    got = [inbound(record, values) for record in records]
    assert got[0][:3] == (0, 10, OK) and got[0][3].spec == spec
    assert got[1] == (1, 11, FAILED, "fetch: IOError") and got[2] == (2, 12, OK, {"a": 1})
    assert isinstance(got[3][3], Placed) and len(values) == 2  # placed: nothing travels
    records, values = unsendable([[0, 7, OK, 0], [1, 8, OK, 1]], [{"img": object()}, 5])
    assert records[0][2] == FAILED and "object" in records[0][3]
    assert records[1] == [1, 8, OK, 0] and values == [5]


@pytest.mark.parametrize(
    "ref",
    [
        b'[0,8,"|O",[1],"numpy"]',  # Python objects from raw memory: never
        b'[0,8,"O,i4",[1],"numpy"]',
        b'[-1,8,"<f4",[2],"numpy"]',
        b'[0,8,"<f4",[2],"pickle"]',
        b"not json",
    ],
)
def test_a_spec_reference_that_is_not_plain_is_refused(ref):
    with pytest.raises(ValueError):
        codec.spec_in({"x": ref})


def test_a_torch_reference_names_a_dtype_not_any_attribute():
    ref = codec.spec_in({"x": b'[0,8,"float32",[2],"torch"]'})["x"]
    assert codec.decode(ref, np.zeros(8, np.uint8)).dtype == torch.float32
    with pytest.raises(ValueError, match="torch dtype"):
        codec.decode(codec.spec_in(b'[0,8,"onnx",[2],"torch"]'), np.zeros(8, np.uint8))


def test_the_placement_record_is_json_and_read_back_only_as_a_signature():
    sig = signature({"x": np.zeros((2, 3), np.float32), "y": (1, 2.0), 5: [np.int8(1)]})
    assert load_signature(dump_signature(sig)) == sig
    for bad in (pickle.dumps(sig), b'["array","|O",[1]]', b"[" * 5000, b'["dict",[[1]]]'):
        with pytest.raises(ValueError):
            load_signature(bad)
