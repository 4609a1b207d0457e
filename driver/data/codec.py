"""Batch codec: a tree of arrays laid out in one flat buffer plus a small spec.

Used for shared-memory batch slots; the spec travels only between the pipeline's own
processes, in the transport form (`spec_out`, then `to_frames`; `from_frames`, then
`spec_in`), as every record between them does (driver.data.frames: never pickle). Stages
served elsewhere use the same wire format (driver.messaging.wire).
Leaves that are numpy arrays, torch tensors or bytes go into the buffer (64-byte aligned);
every other leaf (ints, strings, ...) stays in the spec. Dicts, lists and tuples nest.

    spec, arrays, nbytes = encode(batch)           # leaves may be Stack(sample arrays)
    write(arrays, spec_offsets(spec), buf)         # buf: a writable buffer of ≥ nbytes
    batch = decode(spec, np.frombuffer(buf, np.uint8), to_torch=True)
    frames = to_frames(sample); sample = from_frames(frames)   # wire form, no pickle
    spec = spec_in(from_frames(to_frames(spec_out(spec))))     # a spec, the same way
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

ALIGN = 64
KINDS = ("numpy", "torch", "bytes")
_TORCH_DTYPE = re.compile(r"^[a-z][a-z0-9_]{0,31}$")  # torch.<name>, checked when viewed


@dataclass(frozen=True)
class ArrayRef:
    """Where one array leaf lives in the buffer and how to rebuild it."""

    offset: int
    nbytes: int
    dtype: str
    shape: tuple[int, ...]
    kind: str  # "numpy" | "torch" | "bytes"


class Stack:
    """A batch leaf stacked from equal sample arrays straight into its destination buffer
    by `write` (one copy instead of stacking first and copying the result)."""

    def __init__(self, parts: list[np.ndarray]):
        self.parts = parts
        self.dtype = parts[0].dtype
        self.shape = (len(parts), *parts[0].shape)

    @staticmethod
    def fits(parts: list[Any]) -> bool:
        """True if `parts` are numpy arrays of one plain dtype and shape."""
        first = parts[0]
        return (
            isinstance(first, np.ndarray)
            and not first.dtype.hasobject
            and all(
                isinstance(p, np.ndarray) and p.dtype == first.dtype and p.shape == first.shape
                for p in parts
            )
        )


def encode(tree: Any) -> tuple[Any, list[np.ndarray], int]:
    """Spec (tree with ArrayRef leaves), the uint8 views to copy, and the bytes needed."""
    arrays: list[np.ndarray] = []
    offset = 0

    def walk(node: Any) -> Any:
        nonlocal offset
        if isinstance(node, dict):
            return {key: walk(value) for key, value in node.items()}
        if type(node) in (list, tuple):
            return type(node)(walk(value) for value in node)
        if isinstance(node, Stack):
            raw: Any = node
            nbytes = node.dtype.itemsize * int(np.prod(node.shape))
            ref = ArrayRef(offset, nbytes, node.dtype.str, node.shape, "numpy")
            arrays.append(raw)
            offset += -(-nbytes // ALIGN) * ALIGN
            return ref
        leaf = _as_bytes(node)
        if leaf is None:
            return node
        raw, dtype, shape, kind = leaf
        ref = ArrayRef(offset, raw.nbytes, dtype, shape, kind)
        arrays.append(raw)
        offset += -(-raw.nbytes // ALIGN) * ALIGN
        return ref

    return walk(tree), arrays, offset


def write(arrays: list[np.ndarray], spec: Any, buf: Any) -> None:
    """Copy the arrays from `encode` into `buf` at the offsets of their refs."""
    target = np.frombuffer(buf, dtype=np.uint8)
    for raw, ref in zip(arrays, refs(spec), strict=True):
        dest = target[ref.offset : ref.offset + ref.nbytes]
        if isinstance(raw, Stack):
            np.stack(raw.parts, out=dest.view(raw.dtype).reshape(raw.shape))
        else:
            dest[:] = raw


def refs(spec: Any) -> list[ArrayRef]:
    """The ArrayRef leaves of a spec in encoding order."""
    found: list[ArrayRef] = []

    def walk(node: Any) -> None:
        if isinstance(node, ArrayRef):
            found.append(node)
        elif isinstance(node, dict):
            for value in node.values():
                walk(value)
        elif type(node) in (list, tuple):
            for value in node:
                walk(value)

    walk(spec)
    return found


def decode(spec: Any, base: np.ndarray, to_torch: bool = False) -> Any:
    """Rebuild the tree as views on `base` (a uint8 array); views share its memory."""
    if isinstance(spec, ArrayRef):
        return _view(spec, base, to_torch)
    if isinstance(spec, dict):
        return {key: decode(value, base, to_torch) for key, value in spec.items()}
    if type(spec) in (list, tuple):
        return type(spec)(decode(value, base, to_torch) for value in spec)
    return spec


def to_frames(tree: Any) -> list[Any]:
    """Transport form, no pickle: the body frames of `driver.messaging.wire` (a JSON frame, then
    one raw frame per array, not copied)."""
    from driver.messaging import wire

    return wire.encode(tree)


def from_frames(frames: list[Any]) -> Any:
    """Inverse of `to_frames` (tensors come back as tensors); ValueError if malformed."""
    from driver.messaging import wire

    return wire.decode(frames, torch=True)


def spec_out(spec: Any) -> Any:
    """A spec in a form the wire carries: each ArrayRef as a `bytes` leaf (its fields as
    JSON). No other `bytes` leaf is left in a spec (`encode` moved them all into the
    buffer), so `spec_in` tells them apart without a marker in the user's data."""
    if isinstance(spec, ArrayRef):
        fields = [spec.offset, spec.nbytes, spec.dtype, list(spec.shape), spec.kind]
        return json.dumps(fields, separators=(",", ":")).encode()
    if isinstance(spec, dict):
        return {key: spec_out(value) for key, value in spec.items()}
    if type(spec) in (list, tuple):
        return type(spec)(spec_out(value) for value in spec)
    return spec


def spec_in(tree: Any) -> Any:
    """The spec of `spec_out`'s form; ValueError on a reference that is not well formed."""
    if type(tree) is bytes:
        return _ref(tree)
    if isinstance(tree, dict):
        return {key: spec_in(value) for key, value in tree.items()}
    if type(tree) in (list, tuple):
        return type(tree)(spec_in(value) for value in tree)
    return tree


def _ref(raw: bytes) -> ArrayRef:
    fields = json.loads(raw) if len(raw) < 4096 else None
    if not isinstance(fields, list) or len(fields) != 5:
        raise ValueError(f"array reference {raw[:64]!r}")
    offset, nbytes, dtype, shape, kind = fields
    counts = [offset, nbytes, *shape] if isinstance(shape, list) else [None]
    if not all(type(n) is int and n >= 0 for n in counts) or kind not in KINDS:
        raise ValueError(f"array reference {fields!r}")
    if not isinstance(dtype, str) or not _plain_dtype(dtype, kind):
        raise ValueError(f"array reference dtype {dtype!r}")
    return ArrayRef(offset, nbytes, dtype, tuple(shape), kind)


def _plain_dtype(dtype: str, kind: str) -> bool:
    """A dtype of raw values (never Python objects: their bytes would be pointers)."""
    if kind == "torch":
        return bool(_TORCH_DTYPE.match(dtype))
    try:
        return len(dtype) <= 64 and not np.dtype(dtype).hasobject
    except (TypeError, ValueError, SyntaxError):
        return False


@functools.lru_cache(maxsize=64)
def _torch_dtype(name: str) -> Any:
    """`torch.<name>` if it is a dtype (a name is never looked up on the module itself:
    some would import submodules)."""
    import torch

    dtypes = {str(d).removeprefix("torch."): d for d in vars(torch).values()
              if isinstance(d, torch.dtype)}  # fmt: skip
    if name not in dtypes:
        raise ValueError(f"torch dtype {name!r}")
    return dtypes[name]


def _as_bytes(node: Any) -> tuple[np.ndarray, str, tuple[int, ...], str] | None:
    if isinstance(node, np.ndarray):
        if node.dtype.hasobject:
            return None
        arr = np.ascontiguousarray(node)
        return arr.reshape(-1).view(np.uint8), arr.dtype.str, arr.shape, "numpy"
    if isinstance(node, bytes | bytearray):
        return np.frombuffer(node, dtype=np.uint8), "|u1", (len(node),), "bytes"
    if type(node).__module__.startswith("torch") and hasattr(node, "untyped_storage"):
        tensor = node.detach().cpu().contiguous()
        raw = tensor.reshape(-1).view(__import__("torch").uint8).numpy()
        return raw, str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape), "torch"
    return None


def _view(ref: ArrayRef, base: np.ndarray, to_torch: bool) -> Any:
    raw = base[ref.offset : ref.offset + ref.nbytes]
    if ref.kind == "bytes":
        return raw.tobytes()
    if ref.kind == "torch":
        import torch

        return torch.from_numpy(raw).view(_torch_dtype(ref.dtype)).reshape(ref.shape)
    arr = raw.view(np.dtype(ref.dtype)).reshape(ref.shape)
    if to_torch and arr.dtype.kind in "biuf" and arr.dtype.isnative:
        import torch

        return torch.from_numpy(arr)
    return arr
