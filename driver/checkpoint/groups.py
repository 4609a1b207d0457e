"""Process groups for the checkpoint layer's CPU collectives.

Every gloo process group owns its own TCP transport loop thread, which wakes every 10 ms
even when the group is idle; on a machine whose cores the training ranks fill, each wake-up
preempts a training thread. So the checkpoint layer makes as few groups as it can:

- `training_cpu_group()`: collectives issued by the training thread between steps (the
  preemption agreement, rank 0's choice of checkpoint to resume, the load). The default group
  itself when its backend is gloo (a CPU run: those collectives simply take their turn with
  the loop's), else one gloo group over the same ranks, shared by every caller.
- `Checkpointer`'s writer group (see checkpointer.py): collectives of the background writer,
  which must never interleave with the training thread's; made at the first save.

`new_group` is collective: every rank of the default group makes the same calls in the same
order, which holds here because every rank runs the same code path (construction, then the
first save). So the ranks of one default group must all save or all not: they share
`replica_group` (a torchft replica group is its own process group) and the config.
"""

from __future__ import annotations

import torch.distributed as dist

_shared: tuple[object, object] | None = None  # (default group, its gloo companion)


def default_is_gloo() -> bool:
    """Whether the default process group runs on gloo (CPU tensors, no separate group)."""
    return dist.get_backend() == "gloo"


def training_cpu_group() -> dist.ProcessGroup | None:
    """The group for the training thread's CPU collectives: None (the default group) on
    gloo, else a gloo group over the default group's ranks, made once per default group."""
    global _shared
    if default_is_gloo():
        return None
    world = dist.group.WORLD
    if _shared is None or _shared[0] is not world:
        _shared = (world, dist.new_group(backend="gloo"))
    return _shared[1]
