"""The driver's part of a torchft run (`ft.enabled`), for `driver.raytrain.trainer_for`.

    torch_config, failures, loop_config = trainer_parts(cfg, world=4)

- `TorchftConfig` (Ray Train 2.60, `ray.train.v2.torch.torchft_config`; as
  driver.ft.backend.LighthouseConfig, whose Lighthouse actor requests no CPU, so it fits a
  head pod with `num-cpus: 0`): Ray starts the torchft Lighthouse in an actor on the head
  node with `lighthouse_kwargs(cfg.ft)`, sets
  TORCHFT_LIGHTHOUSE in every worker, gives each one-worker replica group its own process
  group, and its controller replaces only a failed replica group instead of restarting
  every worker.
- `FailureConfig(max_failures=checkpoint.max_failures)`: each replacement is one failure
  to Ray Train; under ft it applies whether or not periodic checkpoints are on.
- the start gate: a TCPStore in the driver with `ft/expected` = the workers at start
  (driver.ft.lighthouse.pass_gate), its `host:port` in `loop_config["ft_gate"]`. The store
  lives as long as the driver process.
- `driver.ft.stop.FtStopCallback` among Ray Train's controller callbacks: below
  `ft.min_replicas` the run ends at once instead of being retried; `stop_reason(err)` gives
  the one-line reason from `fit`'s error.
- `summary_fields(rows, hosts, first_attempt, group_size)`: the end-of-run summary's ft fields.
"""

from __future__ import annotations

from catalog.errors import InputError
from driver.ft.lighthouse import lighthouse_kwargs

_GATES: list = []  # the start gates' stores, kept alive for the driver's lifetime


def check_world(cfg, world: int, group_size: int = 1) -> None:
    """The planned replica groups must reach `ft.min_replicas`."""
    groups = world // group_size
    if groups < cfg.ft.min_replicas:
        message = (
            f"{groups} replica groups planned, fewer than ft.min_replicas={cfg.ft.min_replicas}"
        )
        raise InputError(None, "ft.min_replicas", message)


def trainer_parts(cfg, world: int, backend: str = "gloo") -> tuple:
    """(torch_config, failure_config, extra train_loop_config) of a torchft run."""
    import ray
    import ray.train
    from torch.distributed import TCPStore

    from driver.ft.backend import LighthouseConfig
    from driver.ft.stop import install

    group = cfg.parallelism.replica_group_size
    check_world(cfg, world, group)
    install()
    host = ray.util.get_node_ip_address()
    gate = TCPStore(host, 0, is_master=True, wait_for_workers=False)
    gate.set("ft/expected", str(world))
    _GATES.append(gate)
    torch_config = LighthouseConfig(lighthouse_kwargs=lighthouse_kwargs(cfg.ft),
                                    replica_group_size=group, backend=backend)  # fmt: skip
    failures = ray.train.FailureConfig(max_failures=cfg.checkpoint.max_failures)
    return torch_config, failures, {"ft_gate": f"{host}:{gate.port}"}


RUN_FIELDS = ("ft_quorum_size", "ft_failures_survived", "ft_steps_degraded")
"""The run's ft figures in the summary, from the last row of record (the final figures of
one group may be missing: its writer can die after the last step)."""


def groups_replaced(hosts: dict[int, dict], first_attempt: int, group_size: int = 1) -> int:
    """Replica groups Ray Train started again in this run: per group of `group_size`
    consecutive ranks, the most starts after the first of any of its ranks (the attempt each
    rank's newest start said hello with, driver.channel.state.Sink); a group's members are
    started again together. Not the summary's `restarts` (the most starts of any one rank,
    which counts whole worker-group restarts: two replacements of one group and one of
    another are 3, not 2)."""
    size = max(1, group_size)
    per_group: dict[int, int] = {}
    for rank, host in hosts.items():
        again = max(0, int(host.get("attempt", first_attempt)) - first_attempt)
        per_group[int(rank) // size] = max(per_group.get(int(rank) // size, 0), again)
    return sum(per_group.values())


def summary_fields(rows: list[dict], hosts: dict[int, dict], first_attempt: int,
                   group_size: int = 1) -> dict:  # fmt: skip
    """The end-of-run summary's ft fields: the run's figures from the last row of record,
    and `ft_groups_replaced` (replica groups of `group_size` workers)."""
    last = rows[-1] if rows else {}
    out = {key: last[key] for key in RUN_FIELDS if key in last}
    out["ft_groups_replaced"] = groups_replaced(hosts, first_attempt, group_size)
    return out
