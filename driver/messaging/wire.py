"""The transport's wire format: typed messages of JSON plus raw array frames, no pickle.

A message is a ZeroMQ multipart message `[envelope, *frames]`:

- `envelope`: a packed little-endian header, at most `MAX_ENVELOPE_BYTES`: version byte (2),
  kind byte (`req`, `rep`, `err`, `cancel`, `ping`, `pong`: 1-6), method length (u16), frame
  count (u32), request id (u64, at byte 8: all a proxy reads of a reply), rank (i64),
  deadline (f64, `time.time()` seconds), error code, error text and info lengths (u16, u32,
  u32), then the UTF-8 method, code, text, the info as a JSON object, and one u64 byte
  length per body frame. A body frame with the top bit set in its length (`INLINE`) lies
  inside the envelope frame after the lengths (8-aligned): `pack` puts the body's frames
  there while the envelope stays within `MAX_ENVELOPE_BYTES`, so a small call is one ZeroMQ
  frame; `parse` hands out such frames as slices, and `msg.body` looks the same either way.
  Packing and checking it costs about a fifth of a JSON envelope.
- `frames` (requests and replies): a JSON body `{"p": payload, "a": [array headers]}` and
  one raw frame per array. In the payload an array is `{"$nd": i}`, a tuple `{"$t": [...]}`.
  An array header is `{"t": dtype.str (kind + byte order + size), "s": shape,
  "o": "C" | "F" (contiguity), "k": "numpy" | "torch" | "bytes" | "scalar"}` and, for
  torch dtypes without a numpy twin (bfloat16), `"td"`; an array a client and worker on
  one node pass through shared memory (shm.py) has `"m"`: its reference, and an empty frame.

The receiver checks the envelope before it looks at any frame: version, kind, that its
lengths add up, frame count and each frame's declared length (`truncated`), the declared total
against its limit (`oversized`), anything unparsable (`garbage`); `parse` raises
`WireError(reason)` and the receiver answers with an `err` reply (code "protocol").

    frames = pack(Message("req", id=1, rank=0, method="encode", deadline=t, body=encode(p)))
    msg = parse(sock.recv_multipart(copy=False), max_bytes=64 << 20)
    payload = decode(msg.body)          # arrays: numpy views over the received frames

`send_frames` and `recv_frames` move a multipart message with the backend socket's calls
and plain int flags (pyzmq's `send_multipart`/`recv_multipart` cost about 4 us more per
message in flag enums and a RCVMORE query per frame); frames are never copied.

The format lives in three modules: the envelope (envelope.py), the body (payload.py) and
moving frames (multipart.py). This module re-exports their names unchanged (the same
objects: no extra call on any path) for the format's users outside the transport (the
data pipeline's codec, DiLoCo's link and state files, the benchmark).
"""

from driver.messaging.envelope import (
    INLINE,
    KINDS,
    MAX_ENVELOPE_BYTES,
    MAX_FRAMES,
    VERSION,
    Message,
    WireError,
    pack,
    parse,
    peek_id,
    reply_id,
)
from driver.messaging.multipart import NOBLOCK, recv_frames, send_frames
from driver.messaging.payload import MAX_DIMS, RESERVED, decode, encode, to_shm

__all__ = [
    "INLINE", "KINDS", "MAX_DIMS", "MAX_ENVELOPE_BYTES", "MAX_FRAMES", "NOBLOCK", "RESERVED",
    "VERSION", "Message", "WireError", "decode", "encode", "pack", "parse", "peek_id",
    "recv_frames", "reply_id", "send_frames", "to_shm",
]  # fmt: skip
