"""The body of requests and replies: a payload as JSON plus raw array frames, no pickle.

Body frames are a JSON frame `{"p": payload, "a": [array headers]}` and one raw frame per
array. In the payload an array is `{"$nd": i}`, a tuple `{"$t": [...]}`. An array header
is `{"t": dtype.str (kind + byte order + size), "s": shape, "o": "C" | "F" (contiguity),
"k": "numpy" | "torch" | "bytes" | "scalar"}` and, for torch dtypes without a numpy twin
(bfloat16), `"td"`; an array a client and worker on one node pass through shared memory
(shm.py) has `"m"`: its reference, and an empty frame. The envelope around the body is
envelope.py's; wire.py describes the whole format.

    body = encode({"tokens": tokens})   # [JSON frame, *array buffers], nothing copied
    payload = decode(msg.body)          # arrays: numpy views over the received frames
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from driver.messaging.envelope import WireError, dumps, loads
from driver.messaging.limits import loads as bounded_loads
from driver.messaging.multipart import buffer, nbytes

MAX_DIMS = 32
RESERVED = ("$nd", "$t")
TORCH_ONLY = ("bfloat16",)  # torch dtypes that travel as another numpy dtype's bits ("td")
_DTYPE = re.compile(r"^[<>|=][biufc]\d{1,2}$")
_PLAIN = frozenset({bool, int, float, str})


def encode(payload: Any) -> list[Any]:
    """Body frames for a payload: JSON with array placeholders, then the raw buffers."""
    headers: list[dict[str, Any]] = []
    buffers: list[Any] = []
    tree = _walk(payload, None, headers, buffers)
    return [dumps({"p": tree, "a": headers}).encode(), *buffers]


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
    memoryview; without `shm` it is refused. Raises WireError("garbage") on anything wrong
    (the JSON's nesting is checked before it is parsed: limits.MAX_DEPTH)."""
    try:
        doc = bounded_loads(str(buffer(body[0]), "utf-8"))
        tree, headers = doc["p"], doc["a"]
        if not isinstance(headers, list) or len(headers) != len(body) - 1:
            raise ValueError(f"{len(body) - 1} array frames for {len(headers)} headers")
        arrays = [_array(h, buffer(f), torch, shm) for h, f in zip(headers, body[1:], strict=True)]
        return _restore(tree, arrays)
    except WireError:
        raise
    except Exception as err:  # noqa: BLE001 (whatever a peer sends is a refusal)
        raise WireError("garbage", f"body: {type(err).__name__}: {err}") from None


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
    doc = loads(str(buffer(body[0]), "utf-8"))
    out, placed = list(body), False
    for i, frame in enumerate(body[1:]):
        if nbytes(frame) >= min_bytes:
            ref = place(frame)
            if ref is not None:
                doc["a"][i]["m"], out[i + 1], placed = ref, b"", True
    if not placed:
        return None
    out[0] = dumps(doc).encode()
    return out


def _array(header: dict[str, Any], buf: memoryview, torch: bool, shm: Any = None) -> Any:
    dtype, shape, order, kind = header["t"], header["s"], header["o"], header["k"]
    if not isinstance(dtype, str) or not _DTYPE.match(dtype) or order not in ("C", "F"):
        raise ValueError(f"array header {header}")
    if not isinstance(shape, list) or len(shape) > MAX_DIMS or not all(map(_count, shape)):
        raise ValueError(f"array shape {shape!r}")
    if header.get("td", TORCH_ONLY[0]) not in TORCH_ONLY:
        raise ValueError(f"array torch dtype {header['td']!r}")
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


def _count(value: Any) -> bool:
    return type(value) is int and value >= 0
