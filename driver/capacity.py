"""Capacity planning: how many training workers and auxiliary-service replicas fit a cluster.

Pure functions, no Ray. `plan(nodes, slots_per_node, services, ...)` returns a `Plan`;
`format_plan(plan)` prints it as a table. A slot is one GPU (or one CPU slot on CPU runs).
The rules, in order:

1. Reserve what auxiliary services need whatever the run's size (singletons, fixed counts).
2. Estimate training workers proportionally: each training worker costs its own slots plus,
   for every service that scales with training, `gpus_per_worker / train_workers_per_worker`.
3. Round training workers down to whole groups of the parallel layout (replica groups made
   of FSDP groups), and to `max_workers` when the run asks for fewer.
4. Replicas per service: singletons 1; scaling services ceil(training / ratio); never fewer
   than `min_replicas`.
5. Slots per service: on a single-node debug run several service types may share one
   accelerator (fractions are pooled); on multi-node runs every service type gets whole
   GPUs of its own, at least one.
6. If training plus services exceed the cluster, drop one training group and repeat.

Try it: `python -m driver.capacity 1250 8` prints the 10,000-GPU plan.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field


class CapacityError(ValueError):
    """The cluster cannot hold one training group next to the auxiliary services."""


@dataclass(frozen=True)
class Service:
    name: str
    """Service name (a key of `aux.services`)."""
    gpus_per_worker: float = 1.0
    """Slots one worker requests; fractions share a GPU on single-node runs."""
    train_workers_per_worker: int = 0
    """Training workers one service worker serves; 0 means a fixed count of min_replicas."""
    min_replicas: int = 1
    """Fewest workers of this service."""
    singleton: bool = False
    """Exactly one worker."""


@dataclass(frozen=True)
class Plan:
    nodes: int
    """Nodes in the cluster."""
    slots_per_node: int
    """GPUs (or CPU slots) per node."""
    world_size: int
    """Training workers (the PyTorch world size)."""
    group_size: int
    """Training workers are a whole number of these groups."""
    replicas: dict[str, int] = field(default_factory=dict)
    """Workers per auxiliary service."""
    service_slots: dict[str, float] = field(default_factory=dict)
    """Slots reserved per auxiliary service (a pooled share on single-node runs)."""

    @property
    def total_slots(self) -> int:
        return self.nodes * self.slots_per_node

    @property
    def idle_slots(self) -> float:
        return self.total_slots - self.world_size - _used(self.service_slots)

    def topology(self, shard_size: int = 1):
        """The replica topology of the planned workers (driver.parallel.Topology)."""
        from driver.parallel import Topology

        return Topology(self.world_size, shard_size, self.group_size)


def cpu_slots(svc, slot_cpus: float) -> float:
    """Slots one worker of a service (an AuxServiceConfig) takes on a run without GPUs: a
    GPU service's GPUs each stand for a CPU slot (as CPU workers stand in for GPUs); a CPU
    service its CPUs over the slot's."""
    return svc.gpus_per_worker if svc.gpus_per_worker > 0 else svc.cpus_per_worker / slot_cpus


def services_of(cfg, use_gpu: bool = True) -> list[Service]:
    """The auxiliary services of a run's config as planner requests: a slot is a GPU, or on
    CPU runs a CPU slot of `parallelism.cpus_per_worker` CPUs (`cpu_slots`)."""
    slot = cfg.parallelism.cpus_per_worker
    return [
        Service(
            name,
            s.gpus_per_worker if use_gpu else cpu_slots(s, slot),
            s.train_workers_per_worker,
            s.min_replicas,
            s.singleton,
        )  # fmt: skip
        for name, s in cfg.aux.services.items()
    ]


def _used(service_slots: dict[str, float]) -> float:
    return math.ceil(sum(service_slots.values()) - 1e-9)


def replicas_for(service: Service, world_size: int) -> int:
    """Workers of one service for a given number of training workers."""
    if service.singleton:
        return 1
    if service.train_workers_per_worker > 0:
        return max(service.min_replicas, math.ceil(world_size / service.train_workers_per_worker))
    return service.min_replicas


def workers_per_gpu(gpus_per_worker: float) -> int:
    """Workers of one service that fit one whole GPU of its own (1 for a GPU or more)."""
    if gpus_per_worker <= 0 or gpus_per_worker >= 1:
        return 1
    return max(1, math.floor(1 / gpus_per_worker + 1e-9))


def whole_gpus(gpus_per_worker: float, replicas: int) -> int:
    """Whole GPUs a service's workers use when no other service shares them (multi-node
    runs): fractional workers packed `workers_per_gpu` to a GPU, at least one GPU."""
    if gpus_per_worker >= 1:
        return replicas * math.ceil(gpus_per_worker - 1e-9)
    return max(1, math.ceil(replicas / workers_per_gpu(gpus_per_worker)))


def service_slots(services: list[Service], replicas: dict[str, int], nodes: int) -> dict:
    """Slots per service: pooled fractions on one node, whole GPUs per type on several."""
    slots: dict[str, float] = {}
    for svc in services:
        want = replicas[svc.name] * svc.gpus_per_worker
        if nodes > 1 and svc.gpus_per_worker > 0:
            want = whole_gpus(svc.gpus_per_worker, replicas[svc.name])
        slots[svc.name] = want
    return slots


def plan(
    nodes: int,
    slots_per_node: int,
    services: list[Service] | None = None,
    group_size: int = 1,
    max_workers: int | None = None,
) -> Plan:
    """The training world size and replicas per service that fit; see the module docstring."""
    services = list(services or [])
    if nodes < 1 or slots_per_node < 1:
        raise CapacityError(f"no capacity: {nodes} nodes x {slots_per_node} slots")
    if group_size < 1:
        raise CapacityError("group size must be at least 1")
    total = nodes * slots_per_node
    fixed = sum(
        replicas_for(s, 0) * s.gpus_per_worker
        for s in services
        if s.singleton or s.train_workers_per_worker == 0
    )
    per_worker = 1.0 + sum(
        s.gpus_per_worker / s.train_workers_per_worker
        for s in services
        if not s.singleton and s.train_workers_per_worker > 0
    )
    world = int((total - fixed) // per_worker)
    if max_workers is not None:
        world = min(world, max_workers)
    world -= world % group_size
    while world > 0:
        replicas = {s.name: replicas_for(s, world) for s in services}
        slots = service_slots(services, replicas, nodes)
        if world + _used(slots) <= total:
            return Plan(nodes, slots_per_node, world, group_size, replicas, slots)
        world -= group_size
    raise CapacityError(
        f"{total} slots hold no training group of {group_size} next to the services "
        f"({', '.join(s.name for s in services) or 'none'})"
    )


def format_plan(result: Plan) -> str:
    """The plan as a fixed-width table, one row per role."""
    rows = [("role", "replicas", "slots/worker", "slots")]
    rows.append(("training", str(result.world_size), "1", str(result.world_size)))
    for name, count in result.replicas.items():
        per = result.service_slots[name] / count if count else 0
        rows.append((name, str(count), f"{per:g}", f"{result.service_slots[name]:g}"))
    rows.append(("idle", "", "", f"{result.idle_slots:g}"))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = [
        f"capacity: {result.nodes} nodes x {result.slots_per_node} slots = "
        f"{result.total_slots}; training in groups of {result.group_size}"
    ]
    for row in rows:
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """`python -m driver.capacity [NODES [SLOTS_PER_NODE [GROUP]]]`: the plan with the shipped
    encode_eval services (an encoder per 16 trainers, one evaluator); 1250 x 8 by default."""
    words = list(argv if argv is not None else sys.argv[1:])
    try:
        nodes, slots, group = [int(w) for w in words] + [1250, 8, 8][len(words) :]
        services = [Service("encoder", 1.0, 16), Service("evaluator", 1.0, singleton=True)]
        print(format_plan(plan(nodes, slots, services, group_size=group)))
    except (ValueError, CapacityError) as err:
        print(f"error: {err}\nusage: python -m driver.capacity [NODES [SLOTS [GROUP]]]",
              file=sys.stderr)  # fmt: skip
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
