"""The synchronizer's outer state on disk: raw tensor frames + JSON, never pickle.

`<dir>` is a local folder or a URI (`gs://bucket/team/run/synchronizer`, through fsspec).
`<dir>/outer.state` holds one `driver.messaging.wire` body (the JSON document, then one raw frame
per tensor), each frame preceded by its length (8 bytes, little-endian), after a magic line.
It is written to a temporary file and renamed (or uploaded as one object), so a crash leaves
the previous round's state.
Loading checks every frame length and tensor header (`wire.decode`) before it builds anything.
`<dir>/rounds.jsonl` gets one line per merged round: who contributed, who was late.

    save(dir, OuterState(...));  state = load(dir)  # None when the folder holds no state
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

from driver.diloco.outer import Params
from driver.messaging import wire

MAGIC = b"reve-diloco-outer-state v1\n"
FILE = "outer.state"
ROUNDS = "rounds.jsonl"
MAX_FRAMES = 1 << 16


@dataclass
class OuterState:
    """Everything the synchronizer needs to resume: the round, the shared weights, the outer
    momentum and the learners' view of the shared weights (what they hold after the last
    delta they were sent)."""

    round: int
    shared: Params
    momentum: Params
    view: Params
    meta: dict = field(default_factory=dict)


def _remote(folder: str | os.PathLike):
    """(filesystem, path) for a URI folder (gs://, memory://), None for a local one."""
    if "://" not in str(folder):
        return None
    import fsspec

    return fsspec.core.url_to_fs(str(folder))


def save(folder: str | os.PathLike, state: OuterState) -> str:
    """Write the state (atomically: a local rename, or one object upload); returns its path."""
    payload = {
        "round": state.round,
        "meta": state.meta,
        "shared": state.shared,
        "momentum": state.momentum,
        "view": state.view,
    }
    chunks = [MAGIC]
    for frame in wire.encode(payload):
        buf = memoryview(frame).cast("B")
        chunks += [struct.pack("<Q", buf.nbytes), buf]
    remote = _remote(folder)
    if remote:
        fs, path = remote
        fs.pipe_file(f"{path}/{FILE}", b"".join(chunks))
        return f"{folder}/{FILE}"
    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".{FILE}.tmp"
    with open(tmp, "wb") as out:
        for chunk in chunks:
            out.write(chunk)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, root / FILE)
    return str(root / FILE)


def load(folder: str | os.PathLike) -> OuterState | None:
    """The saved state, None if there is none; ValueError if the file is damaged."""
    path, data = f"{folder}/{FILE}", _read(folder, FILE)
    if data is None:
        return None
    data = memoryview(data)
    if bytes(data[: len(MAGIC)]) != MAGIC:
        raise ValueError(f"{path}: not a DiLoCo outer state")
    frames, pos = [], len(MAGIC)
    while pos < len(data):
        if pos + 8 > len(data) or len(frames) >= MAX_FRAMES:
            raise ValueError(f"{path}: truncated")
        (size,) = struct.unpack_from("<Q", data, pos)
        if pos + 8 + size > len(data):
            raise ValueError(f"{path}: truncated")
        frames.append(data[pos + 8 : pos + 8 + size])
        pos += 8 + size
    try:
        doc = wire.decode(frames, torch=True)
    except wire.WireError as err:
        raise ValueError(f"{path}: {err}") from None
    tensors = {
        k: {n: t.float().clone() for n, t in doc[k].items()} for k in ("shared", "momentum", "view")
    }
    return OuterState(int(doc["round"]), **tensors, meta=dict(doc.get("meta") or {}))


def _read(folder: str | os.PathLike, name: str) -> bytes | None:
    remote = _remote(folder)
    if remote:
        fs, path = remote
        return fs.cat_file(f"{path}/{name}") if fs.exists(f"{path}/{name}") else None
    path = Path(folder) / name
    return path.read_bytes() if path.exists() else None


def append_round(folder: str | os.PathLike, record: dict) -> None:
    """One line of `rounds.jsonl` (an object store rewrites the small file)."""
    line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
    remote = _remote(folder)
    if remote:
        fs, path = remote
        fs.pipe_file(f"{path}/{ROUNDS}", (_read(folder, ROUNDS) or b"") + line)
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    with open(Path(folder) / ROUNDS, "ab") as out:
        out.write(line)


def read_rounds(folder: str | os.PathLike) -> list[dict]:
    data = _read(folder, ROUNDS)
    return [json.loads(line) for line in data.decode().splitlines()] if data else []
