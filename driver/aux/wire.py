"""The transport's wire format: typed messages of JSON plus raw array frames, no pickle.

A message is a ZeroMQ multipart message `[envelope, *frames]`:

- `envelope`: compact JSON object, at most `MAX_ENVELOPE_BYTES`:
  `{"v": 1, "k": kind, "id": request id, "r": rank, "m": method, "d": deadline,
    "c": error code, "e": error text, "i": info, "s": [byte length of each frame]}`
  (only the keys a kind needs). Kinds: `req`, `rep`, `err`, `cancel`, `ping`, `pong`.
- `frames` (requests and replies): a JSON body `{"p": payload, "a": [array headers]}` and
  one raw frame per array. In the payload an array is `{"$nd": i}`, a tuple `{"$t": [...]}`.
  An array header is `{"t": dtype.str (kind + byte order + size), "s": shape,
  "o": "C" | "F" (contiguity), "k": "numpy" | "torch" | "bytes" | "scalar"}` and, for
  torch dtypes without a numpy twin (bfloat16), `"td"`.

The receiver checks the envelope before it looks at any frame: version, kind, field
types, frame count and each frame's declared length (`truncated`), the declared total
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
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import zmq
from zmq.backend import Socket as _RawSocket

VERSION = 1
KINDS = frozenset({"req", "rep", "err", "cancel", "ping", "pong"})
MAX_ENVELOPE_BYTES = 16 << 10
MAX_FRAMES = 4096
MAX_DIMS = 32
RESERVED = ("$nd", "$t")
_DTYPE = re.compile(r"^[<>|=][biufc]\d{1,2}$")


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


@dataclass
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
    env: dict[str, Any] = {"v": VERSION, "k": msg.kind, "id": msg.id}
    if msg.kind == "req":
        env.update(r=msg.rank, m=msg.method, d=msg.deadline)
    elif msg.kind == "cancel":
        env["r"] = msg.rank
    elif msg.kind == "err":
        env.update(c=msg.code, e=msg.error)
    if msg.info is not None:
        env["i"] = msg.info
    if msg.body:
        env["s"] = [_nbytes(frame) for frame in msg.body]
    return [json.dumps(env, separators=(",", ":")).encode(), *msg.body]


def parse(frames: list[Any], max_bytes: int) -> Message:
    """Check and read `[envelope, *frames]`; raises WireError with the refusal reason."""
    if not frames:
        raise WireError("truncated", "empty message")
    if _nbytes(frames[0]) > MAX_ENVELOPE_BYTES:
        raise WireError("oversized", f"envelope over {MAX_ENVELOPE_BYTES} bytes")
    try:
        env = json.loads(bytes(_buffer(frames[0])))
    except (UnicodeDecodeError, ValueError) as err:
        raise WireError("garbage", f"envelope is not JSON ({err})") from None
    if not isinstance(env, dict) or env.get("v") != VERSION or env.get("k") not in KINDS:
        raise WireError("garbage", "envelope lacks version 1 and a known kind")
    sizes = env.get("s", [])
    if not isinstance(sizes, list) or len(sizes) > MAX_FRAMES or not all(_count(s) for s in sizes):
        raise WireError("garbage", "frame sizes are not a list of counts")
    if sum(sizes) > max_bytes:
        raise WireError("oversized", f"{sum(sizes)} bytes declared, limit {max_bytes}")
    body = frames[1:]
    if len(body) != len(sizes) or any(_nbytes(f) != s for f, s in zip(body, sizes, strict=True)):
        raise WireError("truncated", f"{len(body)} frames do not match the declared {sizes}")
    msg = Message(env["k"], body=body)
    try:
        msg.id = _typed(env.get("id", 0), int)
        msg.rank = _typed(env.get("r", 0), int)
        msg.method = _typed(env.get("m", ""), str)
        msg.deadline = float(_typed(env.get("d", 0.0), (int, float)))
        msg.code = _typed(env.get("c", ""), str)
        msg.error = _typed(env.get("e", ""), str)
        msg.info = _typed(env.get("i"), (dict, type(None)))
    except TypeError as err:
        raise WireError("garbage", str(err)) from None
    if msg.kind in ("req", "rep") and not body:
        raise WireError("truncated", f"{msg.kind} without a body")
    return msg


def reply_id(frames: list[Any]) -> int:
    """The request id of a worker's reply, all a proxy needs to route it (the rank's client
    checks the whole message); raises WireError("garbage")."""
    try:
        env = json.loads(frames[0].bytes if hasattr(frames[0], "bytes") else frames[0])
        rid = env["id"]
    except (IndexError, KeyError, TypeError, ValueError, UnicodeDecodeError):
        raise WireError("garbage", "reply envelope without a request id") from None
    if not _count(rid) or env.get("v") != VERSION:
        raise WireError("garbage", "reply envelope without a request id")
    return rid


def peek_id(frames: list[Any]) -> int:
    """The request id of a refused message if its envelope shows one (else 0), so the
    error reply can name it."""
    try:
        rid = json.loads(bytes(_buffer(frames[0]))[:MAX_ENVELOPE_BYTES]).get("id", 0)
    except (IndexError, ValueError, AttributeError, UnicodeDecodeError):
        return 0
    return rid if _count(rid) else 0


def encode(payload: Any) -> list[Any]:
    """Body frames for a payload: JSON with array placeholders, then the raw buffers."""
    headers: list[dict[str, Any]] = []
    buffers: list[Any] = []

    def walk(node: Any, path: Any) -> Any:  # path: (parent path, key), spelled on error
        if node is None or isinstance(node, bool | int | float | str):
            return node
        if isinstance(node, dict):
            out = {}
            for key, value in node.items():
                if not isinstance(key, str) or key in RESERVED:
                    where = _spell(path)
                    raise TypeError(f"payload{where}: key {key!r} (keys are str, not $nd/$t)")
                out[key] = walk(value, (path, key))
            return out
        if isinstance(node, list):
            return [walk(value, (path, i)) for i, value in enumerate(node)]
        if isinstance(node, tuple):
            return {"$t": [walk(value, (path, i)) for i, value in enumerate(node)]}
        if _is_array(node):
            return {"$nd": _add(node, headers, buffers)}
        kind = type(node).__name__
        raise TypeError(f"payload{_spell(path)}: {kind} is not JSON-able or an array")

    tree = walk(payload, None)
    body = json.dumps({"p": tree, "a": headers}, separators=(",", ":")).encode()
    return [body, *buffers]


def decode(body: list[Any], *, torch: bool = False) -> Any:
    """The payload of body frames; arrays are numpy views over their frames (`torch=True`
    gives torch tensors back for arrays sent as tensors). Raises WireError("garbage")."""
    try:
        doc = json.loads(bytes(_buffer(body[0])))
        tree, headers = doc["p"], doc["a"]
        if not isinstance(headers, list) or len(headers) != len(body) - 1:
            raise ValueError(f"{len(body) - 1} array frames for {len(headers)} headers")
        arrays = [_array(h, _buffer(f), torch) for h, f in zip(headers, body[1:], strict=True)]
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


def _array(header: dict[str, Any], buf: memoryview, torch: bool) -> Any:
    dtype, shape, order, kind = header["t"], header["s"], header["o"], header["k"]
    if not isinstance(dtype, str) or not _DTYPE.match(dtype) or order not in ("C", "F"):
        raise ValueError(f"array header {header}")
    if not isinstance(shape, list) or len(shape) > MAX_DIMS or not all(map(_count, shape)):
        raise ValueError(f"array shape {shape!r}")
    dt = np.dtype(dtype)
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


def _typed(value: Any, kinds: Any) -> Any:
    if not isinstance(value, kinds) or isinstance(value, bool) and kinds is int:
        raise TypeError(f"envelope field {value!r} is not {kinds}")
    return value
