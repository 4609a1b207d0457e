"""The run's parallel layout from its shape: what a rendered manifest asks for decides what
trains (pure, no Ray, no torch).

`runner render` passes the shape it rendered (`shape.nodes`, `shape.gpus_per_node`,
`shape.accelerator`, `shape.cpus_per_gpu`); `runner run --local --shape 2x2` passes a
scaled-down one whose accelerator is `cpu` (CPU workers stand in for GPUs). With a shape,
the layout's unset keys are derived:

- `parallelism.workers`: null, every GPU the auxiliary services leave (the capacity plan);
- `parallelism.fsdp_size`: one node's GPUs (FSDP within a node), replicas across nodes;
- `parallelism.replica_group_size`: one node's GPUs (whole nodes per replica group: under
  `ft.enabled` the unit that fails and heals together, FSDP inside it, torchft across);
- `parallelism.cpus_per_worker`: the node's CPUs per GPU;
- `parallelism.device`: `gpu` (the stand-ins are GPUs to Ray too); the process-group
  backend follows the accelerator: nccl, or gloo for the CPU stand-ins.

Without a shape the defaults are a plain run's: fsdp 1, one CPU a worker, and as many workers as
the Ray it runs on has slots (an embedded Ray is started with two). A layout the run sets
explicitly stays, and `check` refuses one that does not fit the shape (more workers than GPUs; a
shard or replica group that straddles nodes while `parallelism.groups_within_nodes` holds), in one
line naming the key.

    derive(cfg.parallelism, cfg.shape)
    check(cfg.parallelism, cfg.shape, source)
"""

from __future__ import annotations

from catalog.errors import InputError

STAND_IN = "cpu"
"""The accelerator of a simulated shape: CPU workers stand in for GPUs."""


def derive(par, shape) -> None:
    """Fill the layout keys the run left unset (None), from its shape."""
    if shape.nodes:
        per_node = shape.gpus_per_node
        if par.fsdp_size is None:
            par.fsdp_size = per_node
        if par.replica_group_size is None:
            par.replica_group_size = per_node
        if par.cpus_per_worker is None:
            par.cpus_per_worker = shape.cpus_per_gpu
        if par.device == "auto":
            par.device = "gpu"
        if par.backend == "auto":
            par.backend = "gloo" if shape.accelerator == STAND_IN else "nccl"
        return
    if par.fsdp_size is None:
        par.fsdp_size = 1
    if par.replica_group_size is None:
        par.replica_group_size = par.fsdp_size
    if par.cpus_per_worker is None:
        par.cpus_per_worker = 1.0


def check(par, shape, source=None) -> None:
    """Refuse, in one line, a layout that does not fit the shape."""
    if not shape.nodes:
        return
    gpus = shape.nodes * shape.gpus_per_node
    where = f"the shape's {shape.nodes} nodes x {shape.gpus_per_node} GPUs"
    if par.workers is not None and par.workers > gpus:
        raise InputError(source, "parallelism.workers", f"{par.workers} workers > {where}")
    if not par.groups_within_nodes:
        return
    for key in ("fsdp_size", "replica_group_size"):
        size = getattr(par, key)
        if straddles(size, shape.gpus_per_node):
            raise InputError(
                source, f"parallelism.{key}",
                f"a group of {size} straddles nodes of {shape.gpus_per_node} GPUs "
                "(parallelism.groups_within_nodes: each group a divisor or a whole multiple "
                "of a node's GPUs)",
            )  # fmt: skip


def straddles(size: int, per_node: int) -> bool:
    """Whether groups of `size` consecutive ranks cross a node boundary somewhere."""
    return per_node % size != 0 and size % per_node != 0


def check_shape(shape, source=None) -> None:
    """The shape's own values: all set, or none (a run without a manifest)."""
    values = (shape.nodes, shape.gpus_per_node)
    if not any(values) and not shape.accelerator:
        return
    if min(values) < 1:
        raise InputError(source, "shape", "nodes and gpus_per_node must both be at least 1")
    if not shape.accelerator:
        raise InputError(source, "shape.accelerator", "must name the accelerator (or cpu)")
    if not shape.cpus_per_gpu > 0:
        raise InputError(source, "shape.cpus_per_gpu", "must be > 0")
