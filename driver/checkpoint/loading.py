"""Loading checkpoints: the checks before (committed, authentic, complete, made for this
model) and the Checkpointer's loading half (`Loading`: latest, resume, load).

Each failure is a one-line CheckpointError naming the checkpoint. Non-tensor entries load
weights-only (`planner.PlainLoadPlanner`): DCP's default unpickles them with any class
allowed. DCP (torch.distributed.checkpoint) itself loads at the first load, not at start-up.
"""

from __future__ import annotations

import logging

import torch
import torch.distributed as dist

from driver.checkpoint.api import CheckpointRef
from driver.checkpoint.auth import identity, load_secret, marker_problem, sha256_of
from driver.checkpoint.commit import failures
from driver.checkpoint.errors import CheckpointError, summarize
from driver.checkpoint.layout import (
    METADATA,
    Marker,
    file_problems,
    join,
    newest_committed,
    step_dir,
)
from driver.checkpoint.state import TrainState, apply_dict, load_dict
from driver.checkpoint.storage import Storage, make_reader


def _first(problems: list[str]) -> str:
    more = f" (and {len(problems) - 2} more)" if len(problems) > 2 else ""
    return "; ".join(problems[:2]) + more


def verified_marker(uri: str, secret: bytes | None = None) -> Marker:
    """The commit marker of `uri`, after checking it is authentic for the run the path
    names (`secret`: the checkpoint secret, default `auth.load_secret()`), that every
    committed file is there, whole, and that `.metadata` is the one committed."""
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
    team, run = identity(uri)
    problem = marker_problem(marker, load_secret() if secret is None else secret, team, run)
    if problem:
        raise CheckpointError(uri, f"is not authentic: {problem}; refusing to load it")
    problems = file_problems(marker.files, storage.files(uri))
    if problems:
        raise CheckpointError(uri, f"is truncated or corrupt: {_first(problems)}")
    if METADATA not in marker.digests:
        raise CheckpointError(uri, f"its marker has no digest of {METADATA}; refusing to load it")
    for name, digest in sorted(marker.digests.items()):
        if sha256_of(storage.fs, join(uri, name)) != digest:
            raise CheckpointError(uri, f"{name} changed after the commit; refusing to load it")
    return marker


def check_resume_uri(uri: str | None) -> None:
    """Before any worker starts: an explicit `checkpoint.resume` URI must name a committed,
    complete checkpoint (`auto` and null pass). Raises CheckpointError."""
    if uri in (None, "auto"):
        return
    quiet = logging.getLogger("gcsfs")  # it logs each failed retry with a traceback
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    try:
        verified_marker(uri.rstrip("/"))
    except CheckpointError:
        raise
    except Exception as exc:  # storage unreachable, no permission, bad bucket name ...
        raise CheckpointError(uri, f"cannot be read: {summarize(exc)}") from None
    finally:
        quiet.setLevel(level)


def check_compatible(uri: str, target: dict) -> None:
    """Refuse a checkpoint whose keys or tensor shapes differ from the load target."""
    from torch.distributed.checkpoint._nested_dict import flatten_state_dict
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    try:
        saved = make_reader(uri).read_metadata().state_dict_metadata
    except failures() as exc:
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


class Loading:
    """The loading half of the Checkpointer (it supplies config, storage, rank, world_size,
    counters and the process group)."""

    def latest(self) -> CheckpointRef | None:
        """The newest committed checkpoint of this run."""
        step = newest_committed(self.storage.step_dirs())
        return None if step is None else CheckpointRef(step, self.storage.uri(step_dir(step)))

    def resume(self, state: TrainState, restarted: bool = False) -> CheckpointRef | None:
        """Load what `config.resume` asks for: nothing, the newest committed, or a URI.
        `restarted` (a restarted worker group): the newest committed checkpoint of this run
        first, whatever `config.resume` says; the configured choice only if there is none."""
        if restarted:
            ref = self.load(state)
            if ref is not None:
                return ref
        if self.config.resume is None:
            return None
        if self.config.resume == "auto":
            return self.load(state)
        return self.load(state, self.config.resume)

    def load(self, state: TrainState, uri: str | None = None) -> CheckpointRef | None:
        """Load a committed checkpoint (default: the newest of this run) into `state`,
        resharding to the current layout. Raises CheckpointError naming the checkpoint."""
        if uri is None:
            ref = self._agreed(self.latest())
            if ref is None:
                return None
            uri = ref.uri
        uri = uri.rstrip("/")
        marker = verified_marker(uri, self.secret)
        source_rank = self.rank if marker.world_size == self.world_size else None
        target = load_dict(state, source_rank)
        check_compatible(uri, target)
        import torch.distributed.checkpoint as dcp

        from driver.checkpoint.planner import PlainLoadPlanner

        try:
            dcp.load(
                target,
                storage_reader=make_reader(uri),
                planner=PlainLoadPlanner(),
                process_group=self._group,
                no_dist=not self._distributed,
            )
        except failures() as error:
            raise CheckpointError(uri, f"cannot be read (corrupt?): {summarize(error)}") from None
        apply_dict(state, target, source_rank)
        self.counters["loads"] += 1
        self.counters["last_committed_step"] = marker.step
        self._last_saved = marker.step
        return CheckpointRef(marker.step, uri, same_layout=source_rank is not None)

    def _agreed(self, ref: CheckpointRef | None) -> CheckpointRef | None:
        """Rank 0's choice, so that every rank loads the same checkpoint."""
        if not self._distributed:
            return ref
        box = [ref]
        dist.broadcast_object_list(box, group=self._group, group_src=0)
        return box[0]
