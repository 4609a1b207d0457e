"""The wire format: payload round trips, array headers, and refusals of bad messages."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import zmq

from driver.aux.errors import AuxCancelled, AuxError, AuxQueueFull, AuxTimeout, from_code
from driver.messaging.envelope import (
    MAX_ENVELOPE_BYTES,
    MAX_FRAMES,
    Message,
    WireError,
    pack,
    parse,
    reply_id,
)
from driver.messaging.payload import decode, encode
from tests.aux.transport import envelope

MAX = 1 << 20


def roundtrip(payload, torch_back=False):
    frames = pack(Message("req", 5, 2, "m", 9.5, body=encode(payload)))
    msg = parse([bytearray(memoryview(f)) for f in frames], MAX)
    assert (msg.kind, msg.id, msg.rank, msg.method, msg.deadline) == ("req", 5, 2, "m", 9.5)
    return decode(msg.body, torch=torch_back)


def test_json_values_tuples_and_scalars_survive():
    payload = {"a": None, "b": True, "c": 3, "d": 1.5, "e": "x", "f": [1, (2, "y")], "g": {}}
    payload["s"] = np.int64(7)
    out = roundtrip(payload)
    assert out == payload and isinstance(out["f"][1], tuple) and out["s"].dtype == np.int64


@pytest.mark.parametrize(
    "array",
    [
        np.arange(12, dtype=np.float32).reshape(3, 4),
        np.arange(12, dtype=">i4").reshape(3, 4),  # big-endian travels as is
        np.asfortranarray(np.arange(6.0).reshape(2, 3)),
        np.arange(20, dtype=np.int16)[::3],  # strided: sent contiguous
        np.zeros((0, 5), np.uint8),
        np.array(True),
        np.ones(3, np.complex64),
    ],
)
def test_arrays_keep_dtype_shape_and_values(array):
    out = roundtrip({"x": array})["x"]
    assert out.dtype == array.dtype and out.shape == array.shape
    assert np.array_equal(out, array)


def test_contiguity_and_byte_order_are_in_the_header():
    body = encode({"f": np.asfortranarray(np.ones((2, 3))), "b": np.ones(2, ">f8")})
    headers = json.loads(body[0])["a"]
    assert [h["o"] for h in headers] == ["F", "C"] and headers[1]["t"] == ">f8"


def test_array_frames_are_not_copied_on_send():
    array = np.arange(1 << 16, dtype=np.float64)
    body = encode({"x": array})
    assert np.shares_memory(np.frombuffer(body[1], np.float64), array)


def test_tensors_and_bytes():
    tensors = {"t": torch.arange(6).reshape(2, 3), "bf": torch.ones(4, dtype=torch.bfloat16)}
    out = roundtrip({**tensors, "raw": b"\x00\x01"})
    assert isinstance(out["t"], np.ndarray) and out["t"].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert out["bf"].dtype == torch.bfloat16 and out["bf"].tolist() == [1.0] * 4
    assert out["raw"] == b"\x00\x01"
    back = roundtrip(tensors, torch_back=True)
    assert torch.equal(back["t"], tensors["t"])
    assert torch.from_numpy(out["t"]).sum().item() == 15


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        ({1: "int key"}, "key 1"),
        ({"$nd": 0}, r"\$nd"),
        ({"x": object()}, "object is not JSON-able"),
        ({"x": np.array(["a"], dtype=object)}, "cannot travel"),
        ({"x": np.array(["2020-01-01"], dtype="datetime64[D]")}, "cannot travel"),
    ],
)
def test_unsendable_payloads_name_the_field(payload, match):
    with pytest.raises(TypeError, match=match):
        encode(payload)


def req(sizes=(2,), kind=1, deadline=1.0, **over):
    return [envelope(kind, 1, 0, b"m", deadline, sizes, **over), b"{}"]


@pytest.mark.parametrize(
    ("frames", "reason"),
    [
        ([], "truncated"),
        ([b"\xff\xfe garbage"], "garbage"),
        ([b'{"v": 1, "k": "req", "id": 1}'], "garbage"),  # a version 1 (JSON) envelope
        (req(version=1), "garbage"),
        (req(kind=0), "garbage"),
        (req(kind=7), "garbage"),
        (req(lengths=(9, 0, 0, 0)), "garbage"),  # lengths past its end
        (req(count=3), "garbage"),  # more sizes declared than present
        (req(count=MAX_FRAMES + 1), "garbage"),
        (req(text=b"\xff\xfe"), "garbage"),  # error text not UTF-8
        (req(text=b"[1]", lengths=(1, 0, 0, 3)), "garbage"),  # info not an object
        (req(deadline=float("nan")), "garbage"),
        (req((2, 3)), "truncated"),  # a frame missing
        (req((5,)), "truncated"),  # a frame shorter than declared
        (req((MAX + 1,)), "oversized"),
        ([b" " * (MAX_ENVELOPE_BYTES + 1)], "oversized"),
        ([envelope(1, 1, 0, b"m", 1.0, ())], "truncated"),  # a request without a body
    ],
)
def test_bad_messages_are_refused_with_a_reason(frames, reason):
    with pytest.raises(WireError) as caught:
        parse(frames, MAX)
    assert caught.value.reason == reason


def test_envelope_fields_round_trip_and_read_from_zmq_frames():
    msg = Message("err", 2**63, -3, "", 0.0, "remote", "ValueError: é", {"live": 2})
    frames = [zmq.Frame(f) for f in pack(msg)]
    assert parse(frames, MAX) == msg and reply_id(frames) == 2**63


@pytest.mark.parametrize(
    "body",
    [
        [b"not json"],
        [b'{"p": {"$nd": 0}, "a": []}'],
        [b'{"p": {"$nd": 0}, "a": [{"t": "|O8", "s": [1], "o": "C", "k": "numpy"}]}', b"x" * 8],
        [b'{"p": {"$nd": 0}, "a": [{"t": "<f4", "s": [3], "o": "C", "k": "numpy"}]}', b"x" * 8],
        [b'{"p": {"$nd": 0}, "a": [{"t": "<f4", "s": [-2], "o": "C", "k": "numpy"}]}', b""],
    ],
)
def test_bad_bodies_are_refused_not_crashed_on(body):
    with pytest.raises(WireError):
        decode(body)


def test_error_codes_map_to_typed_errors():
    assert isinstance(from_code("timeout", "late"), AuxTimeout)
    assert isinstance(from_code("queue_full", "full"), AuxQueueFull)
    assert isinstance(from_code("cancelled", ""), AuxCancelled)
    odd = from_code("weird", "?")
    assert type(odd) is AuxError and odd.code == "weird"


@pytest.mark.parametrize(
    "frames, expected",
    [
        ([envelope(2, 7, sizes=(2,)), b"{}"], 7),
        ([envelope(3, 0, method=b"", text=b"remotex", lengths=(0, 6, 1, 0))], 0),
        ([envelope(2, 3, version=1)], "garbage"),
        ([envelope(2, 3)[:12]], "garbage"),
        ([b'{"v":1,"k":"rep","id":7}'], "garbage"),
        ([b"not json"], "garbage"),
        ([], "garbage"),
    ],
)
def test_reply_id_reads_only_the_request_id(frames, expected):
    if expected == "garbage":
        with pytest.raises(WireError) as err:
            reply_id(frames)
        assert err.value.reason == "garbage"
    else:
        assert reply_id(frames) == reply_id([zmq.Frame(f) for f in frames]) == expected


def test_small_frames_travel_inside_the_envelope_and_big_ones_apart():
    payload = {"small": np.arange(10.0), "big": np.arange(8192), "s": "x", "b": b"\x00" * 9}
    frames = pack(Message("req", 1, 0, "m", 9.0, body=encode(payload)))
    assert len(frames) == 2  # envelope + JSON + small array + bytes in one frame; the big apart
    msg = parse([zmq.Frame(f) for f in frames], MAX)
    out = decode(msg.body)
    assert out["s"] == "x" and out["b"] == payload["b"]
    assert np.array_equal(out["small"], payload["small"]) and out["small"].flags.writeable
    assert np.array_equal(out["big"], payload["big"])


def test_inline_bytes_that_fall_short_or_run_over_are_refused():
    (env,) = pack(Message("rep", 1, body=encode({"a": 1})))
    for cut in (env[:-1], env + b"x"):
        with pytest.raises(WireError) as caught:
            parse([cut], MAX)
        assert caught.value.reason == "truncated"


def test_wire_names_the_format_modules_objects():
    """`driver.messaging.wire` (used by the data codec, DiLoCo and the benchmark) re-exports
    the envelope's, body's and frames' names: the same objects, no wrapper."""
    from driver.messaging import envelope, multipart, payload, wire

    homes = {"NOBLOCK": multipart, "recv_frames": multipart, "send_frames": multipart,
             "MAX_DIMS": payload, "RESERVED": payload, "decode": payload, "encode": payload,
             "to_shm": payload}  # fmt: skip
    for name in wire.__all__:
        assert getattr(wire, name) is getattr(homes.get(name, envelope), name), name
