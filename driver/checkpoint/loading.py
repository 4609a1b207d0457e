"""Checks before a checkpoint is loaded: committed, complete, and made for this model.

Each failure is a one-line CheckpointError naming the checkpoint.
"""

from __future__ import annotations

import torch
from torch.distributed.checkpoint._nested_dict import flatten_state_dict
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.metadata import TensorStorageMetadata

from driver.checkpoint.errors import CheckpointError, summarize
from driver.checkpoint.layout import Marker, file_problems
from driver.checkpoint.storage import Storage, make_reader


def _first(problems: list[str]) -> str:
    more = f" (and {len(problems) - 2} more)" if len(problems) > 2 else ""
    return "; ".join(problems[:2]) + more


def verified_marker(uri: str) -> Marker:
    """The commit marker of `uri`, after checking every committed file is there, whole."""
    storage = Storage(uri)
    if not storage.fs.exists(uri):
        raise CheckpointError(uri, "does not exist")
    try:
        marker = storage.read_marker(uri)
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(uri, f"commit marker is corrupt: {summarize(exc)}") from None
    if marker is None:
        raise CheckpointError(
            uri, "has no commit marker (partial or still being written); refusing to load it"
        )
    problems = file_problems(marker.files, storage.files(uri))
    if problems:
        raise CheckpointError(uri, f"is truncated or corrupt: {_first(problems)}")
    return marker


def check_compatible(uri: str, target: dict) -> None:
    """Refuse a checkpoint whose keys or tensor shapes differ from the load target."""
    try:
        saved = make_reader(uri).read_metadata().state_dict_metadata
    except (Exception, CheckpointException) as exc:
        raise CheckpointError(uri, f"metadata is unreadable: {summarize(exc)}") from None
    flat, _ = flatten_state_dict(target)
    problems = compatibility_problems(
        {k: tuple(v.shape) for k, v in flat.items() if isinstance(v, torch.Tensor)},
        {k: tuple(m.size) for k, m in saved.items() if isinstance(m, TensorStorageMetadata)},
        {k for k in flat if not isinstance(flat[k], torch.Tensor)},
        set(saved),
    )
    if problems:
        raise CheckpointError(uri, f"is incompatible with this model: {_first(problems)}")


def compatibility_problems(
    tensors: dict[str, tuple],
    saved_tensors: dict[str, tuple],
    objects: set[str],
    saved_keys: set[str],
) -> list[str]:
    """Differences between what the model expects and what a checkpoint holds."""
    problems = []
    for key, shape in sorted(tensors.items()):
        if key not in saved_tensors:
            problems.append(f"{key} is missing")
        elif saved_tensors[key] != shape:
            problems.append(
                f"{key} has shape {list(saved_tensors[key])} in the checkpoint, {list(shape)} here"
            )
    problems += [f"{key} is missing" for key in sorted(objects - saved_keys)]
    extra = sorted(k for k in saved_tensors if k.startswith("model.") and k not in tensors)
    problems += [f"{key} is in the checkpoint but not in the model" for key in extra]
    return problems
