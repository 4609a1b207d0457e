"""A learner's view of its model's weights, whole or FSDP-sharded (DTensor parameters).

    full = read(params)                   # every rank: name -> full fp32 CPU tensor
    merge_into(params, "delta", snapshot, new_base)   # every rank: its own part updated
    new_base = broadcast(new_base, params, src=0)     # rank `src`'s full tensors, everywhere
    zeros(params)                          # full-shape zeros (checkpoint load targets)

`params` is `{name: parameter}` (`named(model)`, or a learner's fragment of it).
A sharded parameter is gathered one at a time (`DTensor.full_tensor()`: every rank of the
mesh takes part, so every rank calls `read` at the same point), and written back by each
rank to its own shard: the full tensor is cut locally (`distribute_tensor(...,
src_data_rank=None)`: no communication) and merged into `to_local()`. The merge is
`outer.merge`, applied element-wise to each rank's part, so a sharded learner ends with
exactly the weights a whole one would.
"""

from __future__ import annotations

import torch

from driver.diloco import outer

Params = dict[str, torch.Tensor]


def named(model: torch.nn.Module) -> Params:
    """The model's parameters by name, without a DDP wrapper's `module.` prefix (so a
    learner of one process and one of DDP replicas name their weights alike)."""
    return {k.removeprefix("module."): p for k, p in model.named_parameters()}


def sharded(tensor: torch.Tensor) -> bool:
    """Whether a parameter is a DTensor (FSDP2 shards it)."""
    return type(tensor).__name__ == "DTensor" or hasattr(tensor, "device_mesh")


def read(params: Params) -> Params:
    """The full weights as fp32 CPU copies (a gather per sharded parameter: every rank)."""
    out = {}
    for name, p in params.items():
        whole = p.full_tensor() if sharded(p) else p
        out[name] = whole.detach().to("cpu", torch.float32, copy=True)
    return out


def zeros(params: Params) -> Params:
    """fp32 CPU zeros of each parameter's full shape (no communication)."""
    return {name: torch.zeros(tuple(p.shape), dtype=torch.float32) for name, p in params.items()}


def _part(full: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """This rank's part of a full tensor shaped like parameter `p` (a local cut)."""
    if not sharded(p):
        return full
    from torch.distributed.tensor import distribute_tensor

    cut = distribute_tensor(full.to(p.device), p.device_mesh, p.placements, src_data_rank=None)
    return cut.to_local()


def merge_into(params: Params, rule: str, snapshot: Params, new_base: Params) -> None:
    """Every rank: its part of each parameter becomes `outer.merge(rule, now, snapshot,
    new_base)` (the new shared weights, plus for `delta` the progress since `snapshot`)."""
    with torch.no_grad():
        for name, p in params.items():
            mine = p.to_local() if sharded(p) else p
            now = {name: mine.detach().to("cpu", torch.float32)}
            parts = [{name: _part(t[name], p).cpu()} for t in (snapshot, new_base)]
            mine.copy_(outer.merge(rule, now, *parts)[name].to(mine.dtype))


def broadcast(tensors: Params | None, params: Params, src: int = 0) -> Params:
    """Rank `src`'s full fp32 tensors (named like `params`) on every rank, over the default
    process group, on the parameters' device (NCCL needs CUDA tensors); CPU copies back."""
    out = {}
    for name, p in params.items():
        device = p.device
        if tensors is not None:
            buf = tensors[name].to(device, torch.float32)
        else:
            buf = torch.empty(tuple(p.shape), dtype=torch.float32, device=device)
        torch.distributed.broadcast(buf, src)
        out[name] = buf.cpu() if tensors is None else tensors[name]
    return out
