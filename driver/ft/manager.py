"""torchft's Manager of one replica group, for driver.ft.replica: how it is built and the
flat SUM of gradients through its process group.

    manager, store = build_manager(cfg, group, lighthouse, host, load, state_dict,
                                   group_rank=1, group_size=2, device="cpu")
    loss, allocated, rider = sum_grads(manager, model.parameters(), loss_sum, rider=(1.0,))
    if group_ok(manager, device):   # no member of the group saw a collective fail
        ...                          # (every member takes the same branch)

A replica group is one or several workers (one Manager each, `group_rank` of `group_size`,
meeting in the group's process group's store); the groups' members of the same group rank
reduce together (torchft's process group: NCCL on GPUs, gloo on CPUs). Quorums are
synchronous (`use_async_quorum=False`) and healing sends each member the state of the same
member of a live group over driver.ft.transport. Keep `store` alive as long as the Manager.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta

from driver.config.ft import FtConfig


def replica_id(group: int) -> str:
    """Zero-padded, so torchft's order of replica ids is the order of group numbers."""
    return f"group_{group:05d}"


def build_manager(
    cfg: FtConfig,
    group: int,
    lighthouse: str | None,
    host: str,
    load_state_dict: Callable[[dict], None],
    state_dict: Callable[[], dict],
    group_rank: int = 0,
    group_size: int = 1,
    device: str = "cpu",
):
    """The torchft Manager of one member (`group_rank` of `group_size`) of replica group
    `group`, and the TCPStore it rendezvous through (None when it is the group's process
    group's store: members of a group of several workers meet there, where Ray Train set
    MASTER_ADDR/MASTER_PORT). `lighthouse`: the Lighthouse's address, or None for
    `TORCHFT_LIGHTHOUSE` (set by Ray's TorchftConfig). The cross-group process group is
    NCCL on GPUs, gloo on CPUs (`cross_group_pg`)."""
    from torch.distributed import TCPStore
    from torchft import Manager

    from driver.ft.transport import WeightsOnlyHTTPTransport

    lighthouse = lighthouse or os.environ["TORCHFT_LIGHTHOUSE"]
    timeout = timedelta(seconds=cfg.timeout_s)
    store = None
    if group_size == 1:  # a world of one: a store of its own
        store = TCPStore(host, 0, is_master=True, wait_for_workers=False)
        store_addr, store_port = host, store.port
    else:
        store_addr, store_port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    manager = Manager(
        pg=cross_group_pg(device, timeout),
        min_replica_size=cfg.min_replicas,
        load_state_dict=load_state_dict,
        state_dict=state_dict,
        replica_id=replica_id(group),
        store_addr=store_addr,
        store_port=store_port,
        rank=group_rank,
        world_size=group_size,
        lighthouse_addr=lighthouse,
        hostname=host,
        timeout=timeout,
        quorum_timeout=timedelta(seconds=cfg.quorum_timeout_s),
        connect_timeout=timeout,
        use_async_quorum=False,
        init_sync=False,
        heartbeat_interval=timedelta(milliseconds=cfg.heartbeat_interval_ms),
        checkpoint_transport=WeightsOnlyHTTPTransport(timeout),
    )
    manager._client = QuorumWatch(manager._client)
    return manager, store


class QuorumWatch:
    """torchft's ManagerClient, keeping the replica ids of the newest quorum: the Manager
    uses them only inside its quorum thread (torchft-nightly 2026.10.26,
    `Manager._async_quorum`), and the step plan needs to know which groups are live, not
    only how many (tests/ft/test_manager.py checks the attribute this wraps)."""

    def __init__(self, client):
        self._client = client
        self.replica_ids: list[str] = []

    def _quorum(self, *args, **kwargs):
        result = self._client._quorum(*args, **kwargs)
        self.replica_ids = list(result.replica_ids)
        return result

    def __getattr__(self, name):
        return getattr(self._client, name)


def cross_group_pg(device: str, timeout: timedelta):
    """torchft's process group between the replica groups: NCCL between GPUs, gloo on CPU
    (a CPU worker standing in for a GPU included)."""
    if device == "cuda":
        from torchft import ProcessGroupNCCL

        return ProcessGroupNCCL(timeout=timeout)
    from torchft import ProcessGroupGloo

    return ProcessGroupGloo(timeout=timeout)


def live_groups(manager) -> tuple[int, ...]:
    """The group numbers of the newest quorum's replicas (`replica_id`'s digits, before
    torchft's `:uuid`), sorted."""
    ids = getattr(manager._client, "replica_ids", [])
    return tuple(sorted(int(rid.split(":", 1)[0].rsplit("_", 1)[1]) for rid in ids))


def sum_grads(manager, params, loss_sum: float, midway=None,
              rider: tuple[float, ...] = ()) -> tuple[float, int, list[float]]:  # fmt: skip
    """SUM every gradient across the live groups in place, from its own storage (a sharded
    gradient: this member's shard, `to_local()`), the collectives issued all at once and then
    waited for; and `loss_sum` with the `rider` numbers (small facts every group learns at
    the same step, summed in the loss's collective, float64). No gradient is copied: the
    bytes allocated are only those of zeros for a parameter that got no gradient. Returns
    (the summed loss, bytes allocated, the summed rider). On a failed collective the process
    group is aborted at once, so a peer blocked in the same collective fails now rather than
    at `ft.timeout_s`; the sums are garbage then (the commit vote fails)."""
    import torch

    futures, allocated, device = [], 0, None
    params = [p for p in params if p.requires_grad]
    for i, p in enumerate(params):
        if midway is not None and i == len(params) // 2:  # a drill's point inside the reduce
            midway()
        if p.grad is None:
            p.grad = torch.zeros_like(p)
            allocated += p.grad.numel() * p.grad.element_size()
        grad = p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
        device = grad.device
        futures.append(manager.allreduce(grad, reduce_op=torch.distributed.ReduceOp.SUM))
    small = torch.tensor([loss_sum, *rider], dtype=torch.float64, device=device)
    futures.append(manager.allreduce(small, reduce_op=torch.distributed.ReduceOp.SUM))
    for future in futures:
        future.wait()
    if manager.errored():
        manager._pg.abort()
    sums = small.tolist()
    return sums[0], allocated, sums[1:]


def group_ok(manager, device="cpu") -> bool:
    """Whether no member of this replica group saw torchft's process group fail, the same
    answer on every member (a MAX over the group's own process group, Ray Train's). Member
    k of a group reduces with member k of the other groups only, so when a worker of one
    group dies inside a collective, the members of a live group can disagree (member 0's
    collective failed, member 1's went through). Decide on this, not on one member's
    `manager.errored()`, before a collective inside the group: members that part ways
    there wait for each other forever (one in a broadcast, the other in the commit vote)."""
    import torch
    import torch.distributed as dist

    failed = torch.tensor([1.0 if manager.errored() else 0.0], device=device)
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(failed, op=dist.ReduceOp.MAX)
    return not bool(failed.item())
