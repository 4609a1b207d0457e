"""Checkpoint entries the project writes itself, in a format that cannot run code.

A rank's RNG states (torch, CUDA, numpy, python) and its data-loader progress are stored
as UTF-8 JSON bytes, never pickles: loading a checkpoint must not execute anything found
in it. Binary RNG states travel as base64 strings.

    blob = rng_blob(); restore_rng(blob)             # this process's RNG states
    blob = encode_state(loader.state_dict()); decode_state(blob)
"""

from __future__ import annotations

import base64
import json
import random
from typing import Any

import numpy as np
import torch


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _tensor(text: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8)


def rng_state() -> dict[str, Any]:
    """This process's RNG states as JSON-able data."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    out = {
        "torch": _b64(torch.get_rng_state().numpy().tobytes()),
        "numpy": {
            "kind": kind,
            "keys": _b64(np.asarray(keys, dtype="<u4").tobytes()),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "gauss": float(gauss),
        },
        "python": {"version": version, "state": list(internal), "gauss": gauss_next},
    }
    if torch.cuda.is_available():
        out["cuda"] = [_b64(s.numpy().tobytes()) for s in torch.cuda.get_rng_state_all()]
    return out


def set_rng_state(states: dict[str, Any]) -> None:
    torch.set_rng_state(_tensor(states["torch"]))
    np_state = states["numpy"]
    keys = np.frombuffer(base64.b64decode(np_state["keys"]), dtype="<u4").astype(np.uint32)
    np.random.set_state(
        (np_state["kind"], keys, np_state["pos"], np_state["has_gauss"], np_state["gauss"])
    )
    py = states["python"]
    random.setstate((py["version"], tuple(py["state"]), py["gauss"]))
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([_tensor(text) for text in states["cuda"]])


def rng_blob() -> bytes:
    """This process's RNG states as JSON bytes."""
    return encode_state(rng_state())


def restore_rng(blob: bytes) -> None:
    set_rng_state(decode_state(blob))


def _plain(value: Any) -> Any:
    """numpy scalars and arrays as Python numbers and lists; anything else is refused."""
    if isinstance(value, np.generic | np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not plain data (JSON, numpy)")


def encode_state(state: Any) -> bytes:
    """A state dict of plain data (dicts, lists, str, numbers, bools, None) as JSON bytes."""
    return json.dumps(state, default=_plain, sort_keys=True, allow_nan=True).encode()


def decode_state(blob: bytes) -> Any:
    return json.loads(bytes(blob).decode("utf-8"))
