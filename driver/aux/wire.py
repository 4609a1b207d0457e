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
"""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import zmq
from zmq.backend import Socket as _RawSocket

VERSION = 2  # the envelope's first byte (a version 1 JSON envelope began with "{")
KINDS = ("req", "rep", "err", "cancel", "ping", "pong")  # kind byte: index + 1
_KIND = {kind: i + 1 for i, kind in enumerate(KINDS)}
MAX_ENVELOPE_BYTES = 16 << 10
MAX_FRAMES = 4096
MAX_DIMS = 32
RESERVED = ("$nd", "$t")
_DTYPE = re.compile(r"^[<>|=][biufc]\d{1,2}$")
# version, kind, method length, frame count, id, rank, deadline, code, error and info lengths
_HEAD = struct.Struct("<BBHIQqdHII")
_ID_AT = 8  # the request id's offset: a proxy reads only that of a worker's reply
_ID = struct.Struct("<Q")
INLINE = 1 << 63  # a body frame's size with this bit: it lies inside the envelope frame
_PAD = bytes(8)
_PLAIN = frozenset({bool, int, float, str})
_JSON = json.JSONEncoder(separators=(",", ":"))
_dumps, _loads = _JSON.encode, json.JSONDecoder().decode


NOBLOCK = int(zmq.NOBLOCK)
_SNDMORE = int(zmq.SNDMORE)
_send, _recv = _RawSocket.send, _RawSocket.recv


def send_frames(sock: zmq.Socket, frames: list[Any], flags: int = 0) -> None:
    """Send `frames` as one message, zero-copy (a refusal raises on the first frame)."""
    more = flags | _SNDMORE
    for frame in frames[:-1]:
        _send(sock, frame, more, False)
    _send(sock, frames[-1], flags, False)


def recv_frames(sock: zmq.Socket, flags: int = NOBLOCK) -> list[zmq.Frame]:
    """One whole message as zmq.Frame objects (raises zmq.Again when none is waiting)."""
    frame = _recv(sock, flags, False)
    frames = [frame]
    while frame.more:
        frame = _recv(sock, flags, False)
        frames.append(frame)
    return frames


class WireError(ValueError):
    """A message that does not parse; `reason` is "garbage", "truncated" or "oversized"."""

    def __init__(self, reason: str, message: str):
        super().__init__(f"{reason}: {message}")
        self.reason = reason


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
    info = b"" if msg.info is None else _dumps(msg.info).encode()
    sizes = [_nbytes(frame) for frame in msg.body]
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
    """Check and read `[envelope, *frames]`; raises WireError with the refusal reason."""
    if not frames:
        raise WireError("truncated", "empty message")
    env = _buffer(frames[0])
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
                msg.info = _loads(str(env[at - n_info : at], "utf-8"))
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
            if apart >= len(frames) or _nbytes(frames[apart]) != n:
                break
            body.append(frames[apart])
    return body, apart, end


def reply_id(frames: list[Any]) -> int:
    """The request id of a worker's reply, all a proxy needs to route it (the rank's client
    checks the whole message); raises WireError("garbage")."""
    try:
        env = _buffer(frames[0])
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


def encode(payload: Any) -> list[Any]:
    """Body frames for a payload: JSON with array placeholders, then the raw buffers."""
    headers: list[dict[str, Any]] = []
    buffers: list[Any] = []
    tree = _walk(payload, None, headers, buffers)
    return [_dumps({"p": tree, "a": headers}).encode(), *buffers]


def _walk(node: Any, path: Any, headers: list[dict[str, Any]], buffers: list[Any]) -> Any:
    """The JSON tree of `node`, its arrays moved to `buffers`. (Not a closure: a recursive
    closure is a reference cycle, and would keep the arrays alive until a GC pass.)"""
    if type(node) in _PLAIN or node is None or isinstance(node, bool | int | float | str):
        return node
    if type(node) is bytes:  # the common array: no numpy on the way
        headers.append({"t": "|u1", "s": [len(node)], "o": "C", "k": "bytes"})
        buffers.append(node)
        return {"$nd": len(headers) - 1}
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if not isinstance(key, str) or key in RESERVED:
                where = _spell(path)
                raise TypeError(f"payload{where}: key {key!r} (keys are str, not $nd/$t)")
            out[key] = _walk(value, (path, key), headers, buffers)
        return out
    if isinstance(node, list):
        return [_walk(value, (path, i), headers, buffers) for i, value in enumerate(node)]
    if isinstance(node, tuple):
        return {"$t": [_walk(value, (path, i), headers, buffers) for i, value in enumerate(node)]}
    if _is_array(node):
        return {"$nd": _add(node, headers, buffers)}
    kind = type(node).__name__
    raise TypeError(f"payload{_spell(path)}: {kind} is not JSON-able or an array")


def decode(body: list[Any], *, torch: bool = False, shm: Any = None) -> Any:
    """The payload of body frames; arrays are numpy views over their frames (`torch=True`
    gives torch tensors back for arrays sent as tensors). An array placed in shared memory
    (header "m": a reference, empty frame) is read through `shm(reference, nbytes)`, a
    memoryview; without `shm` it is refused. Raises WireError("garbage")."""
    try:
        doc = _loads(str(_buffer(body[0]), "utf-8"))
        tree, headers = doc["p"], doc["a"]
        if not isinstance(headers, list) or len(headers) != len(body) - 1:
            raise ValueError(f"{len(body) - 1} array frames for {len(headers)} headers")
        arrays = [_array(h, _buffer(f), torch, shm) for h, f in zip(headers, body[1:], strict=True)]
        return _restore(tree, arrays)
    except WireError:
        raise
    except (ValueError, TypeError, KeyError, IndexError, UnicodeDecodeError) as err:
        raise WireError("garbage", f"body: {err}") from None


def _spell(path: Any) -> str:
    """`(((None, "a"), 0), "b")` -> `['a'][0]['b']`."""
    keys = []
    while path is not None:
        path, key = path
        keys.append(f"[{key!r}]")
    return "".join(reversed(keys))


def _is_array(node: Any) -> bool:
    if isinstance(node, np.ndarray | np.generic | bytes | bytearray | memoryview):
        return True
    return type(node).__module__.startswith("torch") and hasattr(node, "untyped_storage")


def _add(node: Any, headers: list[dict[str, Any]], buffers: list[Any]) -> int:
    kind, extra = "numpy", {}
    if isinstance(node, bytes | bytearray | memoryview):
        arr, kind = np.frombuffer(node, np.uint8), "bytes"
    elif isinstance(node, np.generic):
        arr, kind = np.asarray(node), "scalar"
    elif isinstance(node, np.ndarray):
        arr = node
    else:
        arr, kind, extra = _torch_array(node)
    if arr.dtype.hasobject or not _DTYPE.match(arr.dtype.str):
        raise TypeError(f"dtype {arr.dtype} cannot travel (plain numeric and bool only)")
    order = "F" if arr.ndim > 1 and arr.flags.f_contiguous and not arr.flags.c_contiguous else "C"
    raw = arr.T if order == "F" else np.ascontiguousarray(arr)
    headers.append({"t": arr.dtype.str, "s": list(arr.shape), "o": order, "k": kind, **extra})
    buffers.append(raw.reshape(-1).view(np.uint8).data)
    return len(headers) - 1


def _torch_array(tensor: Any) -> tuple[np.ndarray, str, dict[str, str]]:
    import torch

    tensor = tensor.detach().cpu()
    name = str(tensor.dtype).removeprefix("torch.")
    if tensor.dtype in (torch.bfloat16,):
        return tensor.contiguous().view(torch.uint16).numpy(), "torch", {"td": name}
    return tensor.numpy(), "torch", {}


def to_shm(body: list[Any], place: Any, min_bytes: int) -> list[Any] | None:
    """`body` with each array frame of at least `min_bytes` handed to `place(frame)`, which
    copies it into shared memory and returns its reference (None: it stays a frame); the
    frame is emptied and its header gets "m": the reference. None if nothing was placed."""
    doc = _loads(str(_buffer(body[0]), "utf-8"))
    out, placed = list(body), False
    for i, frame in enumerate(body[1:]):
        if _nbytes(frame) >= min_bytes:
            ref = place(frame)
            if ref is not None:
                doc["a"][i]["m"], out[i + 1], placed = ref, b"", True
    if not placed:
        return None
    out[0] = _dumps(doc).encode()
    return out


def _array(header: dict[str, Any], buf: memoryview, torch: bool, shm: Any = None) -> Any:
    dtype, shape, order, kind = header["t"], header["s"], header["o"], header["k"]
    if not isinstance(dtype, str) or not _DTYPE.match(dtype) or order not in ("C", "F"):
        raise ValueError(f"array header {header}")
    if not isinstance(shape, list) or len(shape) > MAX_DIMS or not all(map(_count, shape)):
        raise ValueError(f"array shape {shape!r}")
    dt = np.dtype(dtype)
    if "m" in header:
        if shm is None or buf.nbytes:
            raise ValueError("an array in shared memory where none is accepted")
        buf = shm(header["m"], math.prod(shape) * dt.itemsize)
    if math.prod(shape) * dt.itemsize != buf.nbytes:
        raise WireError("truncated", f"array {dtype}{shape} in a frame of {buf.nbytes} bytes")
    if kind == "bytes":
        return bytes(buf)
    arr = np.frombuffer(buf, dt).reshape(shape, order=order)
    if kind == "scalar":
        return arr[()]
    if kind == "torch" and (torch or "td" in header):
        import torch as th

        tensor = th.from_numpy(arr if arr.flags.writeable else arr.copy())
        return tensor.view(getattr(th, header["td"])) if "td" in header else tensor
    return arr


def _restore(node: Any, arrays: list[Any]) -> Any:
    if isinstance(node, dict):
        if "$nd" in node:
            return arrays[node["$nd"]]
        if "$t" in node:
            return tuple(_restore(value, arrays) for value in node["$t"])
        return {key: _restore(value, arrays) for key, value in node.items()}
    if isinstance(node, list):
        return [_restore(value, arrays) for value in node]
    return node


def _buffer(frame: Any) -> memoryview:
    buf = frame.buffer if hasattr(frame, "buffer") else frame
    return buf if isinstance(buf, memoryview) else memoryview(buf)


def _nbytes(frame: Any) -> int:
    if isinstance(frame, bytes | bytearray):
        return len(frame)
    if isinstance(frame, memoryview):
        return frame.nbytes
    return len(frame)


def _count(value: Any) -> bool:
    return type(value) is int and value >= 0
