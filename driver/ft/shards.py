"""A replica group member's state as it travels when a group heals: its own shards.

torchft heals each member of a group that is behind from the member of the same group rank
in a live group (torchft's Manager asks the source replica's checkpoint server for its own
`group_rank`), so with FSDP inside a group, shard i goes to shard i and no rank ever holds
the whole model. What travels is plain tensors (the local shard of every DTensor, no copy),
which driver.ft.transport loads with PyTorch's weights-only unpickler; the receiving member
makes them DTensors again on its own mesh and placements.

    sd = {name: local_tree(obj.state_dict()) for name, obj in state.items()}   # the sender
    obj.load_state_dict(like(obj, sd[name]))                                    # the receiver
"""

from __future__ import annotations


def is_dtensor(value) -> bool:
    return type(value).__name__ == "DTensor" and hasattr(value, "to_local")


def local_tree(tree):
    """`tree` with every DTensor replaced by its local shard (a view: no copy)."""
    if is_dtensor(tree):
        return tree.to_local()
    if isinstance(tree, dict):
        return {key: local_tree(value) for key, value in tree.items()}
    if isinstance(tree, list | tuple):
        return type(tree)(local_tree(value) for value in tree)
    return tree


def as_like(value, ref):
    """`value` (a local shard) as a DTensor like `ref` (a DTensor parameter or state), or
    `value` when `ref` is not sharded or the shapes do not match (a scalar `step`)."""
    if not is_dtensor(ref) or not hasattr(value, "shape"):
        return value
    if tuple(value.shape) != tuple(ref.to_local().shape):
        return value
    from torch.distributed.tensor import DTensor

    return DTensor.from_local(value, ref.device_mesh, ref.placements, run_check=False,
                              shape=ref.shape, stride=ref.stride())  # fmt: skip


def like(obj, received):
    """A received state dict made loadable into `obj` (a module, an optimizer, or anything
    with state_dict/load_state_dict): shards become DTensors on `obj`'s own placements."""
    import torch

    if isinstance(obj, torch.nn.Module):
        current = obj.state_dict()
        return {key: as_like(value, current.get(key)) for key, value in received.items()}
    if isinstance(obj, torch.optim.Optimizer):
        params = [p for group in obj.param_groups for p in group["params"]]
        state = {
            index: {name: as_like(value, params[int(index)]) for name, value in entry.items()}
            for index, entry in received.get("state", {}).items()
        }
        return {**received, "state": state}
    return received
