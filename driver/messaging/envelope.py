"""The envelope of every transport message: a packed binary header, checked before use.

A message is a ZeroMQ multipart message `[envelope, *frames]`. The envelope is a packed
little-endian header, at most `MAX_ENVELOPE_BYTES`: version byte (2), kind byte (`req`,
`rep`, `err`, `cancel`, `ping`, `pong`: 1-6), method length (u16), frame count (u32),
request id (u64, at byte 8: all a proxy reads of a reply), rank (i64), deadline (f64,
`time.time()` seconds), error code, error text and info lengths (u16, u32, u32), then the
UTF-8 method, code, text, the info as a JSON object, and one u64 byte length per body
frame. A body frame with the top bit set in its length (`INLINE`) lies inside the envelope
frame after the lengths (8-aligned): `pack` puts the body's frames there while the
envelope stays within `MAX_ENVELOPE_BYTES`, so a small call is one ZeroMQ frame; `parse`
hands out such frames as slices, and `msg.body` looks the same either way. Packing and
checking it costs about a fifth of a JSON envelope. What the body frames hold is
payload.py's; wire.py describes the whole format.

The receiver checks the envelope before it looks at any frame: version, kind, that its
lengths add up, frame count and each frame's declared length (`truncated`), the declared
total against its limit (`oversized`), anything unparsable (`garbage`); `parse` raises
`WireError(reason)` and the receiver answers with an `err` reply (code "protocol").

    frames = pack(Message("req", id=1, rank=0, method="encode", deadline=t, body=body))
    msg = parse(sock.recv_multipart(copy=False), max_bytes=64 << 20)
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Any

from driver.messaging.limits import WireError
from driver.messaging.limits import loads as bounded_loads
from driver.messaging.multipart import buffer, nbytes

VERSION = 2  # the envelope's first byte (a version 1 JSON envelope began with "{")
KINDS = ("req", "rep", "err", "cancel", "ping", "pong")  # kind byte: index + 1
_KIND = {kind: i + 1 for i, kind in enumerate(KINDS)}
MAX_ENVELOPE_BYTES = 16 << 10
MAX_FRAMES = 4096
# version, kind, method length, frame count, id, rank, deadline, code, error and info lengths
_HEAD = struct.Struct("<BBHIQqdHII")
_ID_AT = 8  # the request id's offset: a proxy reads only that of a worker's reply
_ID = struct.Struct("<Q")
INLINE = 1 << 63  # a body frame's size with this bit: it lies inside the envelope frame
_PAD = bytes(8)
_JSON = json.JSONEncoder(separators=(",", ":"))
dumps, loads = _JSON.encode, json.JSONDecoder().decode  # compact JSON, for info and bodies


@dataclass(slots=True)
class Message:
    """One typed message; `body` holds the undecoded payload frames (JSON + arrays)."""

    kind: str
    id: int = 0
    rank: int = 0
    method: str = ""
    deadline: float = 0.0
    code: str = ""
    error: str = ""
    info: dict | None = None
    body: list[Any] = field(default_factory=list)


def pack(msg: Message) -> list[Any]:
    """Frames to send: the envelope then the body frames (array buffers are not copied)."""
    method, code, error = msg.method.encode(), msg.code.encode(), msg.error.encode()
    info = b"" if msg.info is None else dumps(msg.info).encode()
    sizes = [nbytes(frame) for frame in msg.body]
    head = _HEAD.pack(
        VERSION, _KIND[msg.kind], len(method), len(sizes), msg.id, msg.rank, msg.deadline,
        len(code), len(error), len(info),
    )  # fmt: skip
    parts, apart = [head, method, code, error, info, b""], []
    end = _HEAD.size + len(method) + len(code) + len(error) + len(info) + 8 * len(sizes)
    for i, (frame, n) in enumerate(zip(msg.body, sizes, strict=True)):
        pad = -end % 8
        if end + pad + n <= MAX_ENVELOPE_BYTES:  # small: inside the envelope, 8-aligned
            parts += (_PAD[:pad], frame)
            sizes[i] |= INLINE
            end += pad + n
        else:
            apart.append(frame)
    if sizes:
        parts[5] = struct.pack(f"<{len(sizes)}Q", *sizes)
    return [b"".join(parts), *apart]


def parse(frames: list[Any], max_bytes: int) -> Message:
    """Check and read `[envelope, *frames]`; raises WireError with the refusal reason (any
    other error while reading it, too, as "garbage": whatever a peer sends is a refusal)."""
    try:
        return _parse(frames, max_bytes)
    except WireError:
        raise
    except Exception as err:  # noqa: BLE001
        raise WireError("garbage", f"envelope: {type(err).__name__}: {err}") from None


def _parse(frames: list[Any], max_bytes: int) -> Message:
    if not frames:
        raise WireError("truncated", "empty message")
    env = buffer(frames[0])
    if env.nbytes > MAX_ENVELOPE_BYTES:
        raise WireError("oversized", f"envelope over {MAX_ENVELOPE_BYTES} bytes")
    if env.nbytes < _HEAD.size or env[0] != VERSION or not 0 < env[1] <= len(KINDS):
        raise WireError("garbage", f"envelope lacks version {VERSION} and a known kind")
    _, kind, n_method, count, rid, rank, deadline, n_code, n_error, n_info = _HEAD.unpack_from(env)
    at = _HEAD.size + n_method + n_code + n_error + n_info
    if count > MAX_FRAMES or env.nbytes < at + 8 * count:
        raise WireError("garbage", f"envelope of {env.nbytes} bytes does not match its lengths")
    sizes = struct.unpack_from(f"<{count}Q", env, at) if count else ()
    total = sum(size & ~INLINE for size in sizes)
    if total > max_bytes:
        raise WireError("oversized", f"{total} bytes declared, limit {max_bytes}")
    body, apart, end = _body(env, at + 8 * count, sizes, frames)
    if len(body) != count or apart != len(frames) - 1 or end != env.nbytes:
        what = f"{len(frames) - 1} frames and {env.nbytes - at - 8 * count} inline bytes"
        raise WireError("truncated", f"{what} do not match the declared {sizes}")
    if deadline != deadline or kind <= 2 and not body:  # NaN, or a req/rep without a body
        what = "a NaN deadline" if deadline != deadline else f"{KINDS[kind - 1]} without a body"
        raise WireError("garbage" if deadline != deadline else "truncated", what)
    msg = Message(KINDS[kind - 1], rid, rank, deadline=deadline, body=body)
    if at > _HEAD.size:
        try:
            text = str(env[_HEAD.size : at - n_info], "utf-8")
            msg.method, msg.code = text[:n_method], text[n_method : n_method + n_code]
            msg.error = text[n_method + n_code :]
            if len(text.encode()) != at - n_info - _HEAD.size:
                raise ValueError("a length cuts a character")
            if n_info:
                msg.info = bounded_loads(str(env[at - n_info : at], "utf-8"))
        except WireError:
            raise
        except ValueError as err:
            raise WireError("garbage", f"envelope text: {err}") from None
        if msg.info is not None and not isinstance(msg.info, dict):
            raise WireError("garbage", "envelope info is not an object")
    return msg


def _body(env: memoryview, end: int, sizes: Any, frames: list[Any]) -> tuple[list, int, int]:
    """The body frames: slices of the envelope (inline) or the frames after it, in the
    declared order; stops at the first that does not match. Also how many frames after the
    envelope it used and where the inline ones end."""
    body, apart = [], 0
    for size in sizes:
        n = size & ~INLINE
        if size & INLINE:
            end += -end % 8
            if end + n > env.nbytes:
                break
            body.append(env[end : end + n])
            end += n
        else:
            apart += 1
            if apart >= len(frames) or nbytes(frames[apart]) != n:
                break
            body.append(frames[apart])
    return body, apart, end


def reply_id(frames: list[Any]) -> int:
    """The request id of a worker's reply, all a proxy needs to route it (the rank's client
    checks the whole message); raises WireError("garbage")."""
    try:
        env = buffer(frames[0])
        if env.nbytes >= _HEAD.size and env[0] == VERSION and 0 < env[1] <= len(KINDS):
            return _ID.unpack_from(env, _ID_AT)[0]
    except (IndexError, TypeError):
        pass
    raise WireError("garbage", "reply envelope without a request id")


def peek_id(frames: list[Any]) -> int:
    """The request id of a refused message if its envelope shows one (else 0), so the
    error reply can name it."""
    try:
        return reply_id(frames)
    except WireError:
        return 0
