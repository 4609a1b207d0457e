"""torchft's Manager of one replica group, for driver.ft.replica: how it is built and the
flat SUM of gradients through its process group.

    manager, store = build_manager(cfg, group, lighthouse, host, load, state_dict)
    loss = sum_grads(manager, model.parameters(), loss_sum)   # after backward

Each group is a world of one with its own TCPStore and ProcessGroupGloo; quorums are
synchronous (`use_async_quorum=False`) and healing sends weights and optimizer state over
driver.ft.transport. Keep `store` alive as long as the Manager.
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
):
    """The group's torchft Manager and the TCPStore it rendezvous through. `lighthouse`:
    the Lighthouse's address, or None for `TORCHFT_LIGHTHOUSE` (set by Ray's TorchftConfig)."""
    from torch.distributed import TCPStore
    from torchft import Manager, ProcessGroupGloo

    from driver.ft.transport import WeightsOnlyHTTPTransport

    lighthouse = lighthouse or os.environ["TORCHFT_LIGHTHOUSE"]
    store = TCPStore(host, 0, is_master=True, wait_for_workers=False)
    timeout = timedelta(seconds=cfg.timeout_s)
    manager = Manager(
        pg=ProcessGroupGloo(timeout=timeout),
        min_replica_size=cfg.min_replicas,
        load_state_dict=load_state_dict,
        state_dict=state_dict,
        replica_id=replica_id(group),
        store_addr=host,
        store_port=store.port,
        rank=0,
        world_size=1,
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


def live_groups(manager) -> tuple[int, ...]:
    """The group numbers of the newest quorum's replicas (`replica_id`'s digits, before
    torchft's `:uuid`), sorted."""
    ids = getattr(manager._client, "replica_ids", [])
    return tuple(sorted(int(rid.split(":", 1)[0].rsplit("_", 1)[1]) for rid in ids))


def sum_grads(manager, params, loss_sum: float) -> float:
    """SUM the gradients of `params` (and `loss_sum`) across the live groups in one flat
    buffer; each gradient becomes a view of it. Returns the summed loss. On a failed
    collective the process group is aborted at once, so a peer blocked in the same
    collective fails now rather than at `ft.timeout_s`."""
    import torch

    params = [p for p in params if p.requires_grad]
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads] + [grads[0].new_tensor([loss_sum])])
    manager.allreduce(flat, reduce_op=torch.distributed.ReduceOp.SUM).wait()
    if manager.errored():
        manager._pg.abort()
    offset = 0
    for p, g in zip(params, grads, strict=True):
        p.grad = flat[offset : offset + g.numel()].view_as(g)
        offset += g.numel()
    return float(flat[-1])
