"""The parallel layout of a run: the one place that knows the replica topology, plus the
device set-up and model wrapping every training worker uses.

    topo = Topology.from_config(cfg.parallelism, world=8)   # fsdp_size 2, groups of 4
    topo.group_of(5), topo.groups, topo.lowest_rank(1), topo.replica_of(5)  # 1, 2, 4, 2
    topo.is_writer(4, position=0)     # True: group 1 is the lowest live group (group 0 lost)
    device = setup_device(cfg, ctx, logger)
    model = wrap(model, cfg, device, world)                 # DDP, or FSDP2/HSDP (torchft:
                                                            # world = one replica group)

Three levels: a *shard group* (`fsdp_size` workers holding one sharded model copy), a
*replica* (a data-parallel model copy: `rank // fsdp_size`) and a *replica group*
(`replica_group_size` workers, a whole number of shard groups: the unit capacity planning
rounds to and, under torchft, the unit that fails and heals together, with its own
process group). Capacity planning, the checkpoint layer and torchft ask this object; none
works it out again. It also holds the one rule for which rank writes the run's records
(the full metrics rows; under torchft, the checkpoints): `is_writer`. Importing this module
does not import torch.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Topology:
    """Ranks 0..world-1 cut into replica groups of `group_size`, each made of shard groups
    of `shard_size`."""

    world: int
    """Training workers (the PyTorch world size without torchft)."""
    shard_size: int = 1
    """Workers that shard one model copy (`parallelism.fsdp_size`); 1 under DDP."""
    group_size: int = 1
    """Workers per replica group (`parallelism.replica_group_size`)."""

    def __post_init__(self):
        if self.shard_size < 1 or self.group_size < 1 or self.world < 1:
            raise ValueError(f"bad topology {self}")
        if self.group_size % self.shard_size or self.world % self.group_size:
            raise ValueError(f"{self}: groups must be whole shard groups and fill the world")

    @classmethod
    def from_config(cls, parallelism, world: int) -> Topology:
        """From the `parallelism` config node (replica_group_size null: one shard group)."""
        shard = max(1, int(parallelism.fsdp_size))
        return cls(world, shard, int(parallelism.replica_group_size or shard))

    @property
    def groups(self) -> int:
        """Number of replica groups."""
        return self.world // self.group_size

    def group_of(self, rank: int) -> int:
        """The replica group of a rank."""
        return rank // self.group_size

    def lowest_rank(self, group: int) -> int:
        """The lowest rank of a replica group."""
        return group * self.group_size

    def ranks_of(self, group: int) -> range:
        """The ranks of a replica group."""
        return range(self.lowest_rank(group), self.lowest_rank(group) + self.group_size)

    def group_rank(self, rank: int) -> int:
        """A rank's position inside its replica group."""
        return rank % self.group_size

    def replica_of(self, rank: int) -> int:
        """The data-parallel model copy a rank holds a part of (`rank // fsdp_size`)."""
        return rank // self.shard_size

    def is_writer(self, rank: int, position: int | None = None) -> bool:
        """Whether `rank` writes the run's records (the full metrics rows, and under torchft
        the checkpoints): the lowest rank of the lowest live replica group. `position`: the
        place of the rank's group among the live groups (torchft's participating rank);
        None when every group is live (then rank 0 writes)."""
        place = self.group_of(rank) if position is None else position
        return place == 0 and self.group_rank(rank) == 0

    def replicas_per_group(self) -> int:
        """Model copies inside one replica group (the HSDP replicate dimension)."""
        return self.group_size // self.shard_size


def setup_device(cfg, ctx, logger):
    """Pick the device, set threads and pin to the NUMA node; returns the torch device."""
    import ray.train.torch
    import torch

    from driver.numa import pin_worker

    # GPUs a simulated shape's CPU workers stand in for (`runner run --local --shape`) have
    # no CUDA: such a worker trains on the CPU.
    device = ray.train.torch.get_device() if torch.cuda.is_available() else torch.device("cpu")
    bus_id = None
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        if hasattr(props, "pci_bus_id"):
            bus_id = f"{props.pci_domain_id:04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
    else:
        torch.set_num_threads(max(1, int(cfg.parallelism.cpus_per_worker)))
    if cfg.parallelism.numa_affinity:
        cpus = pin_worker(ctx.get_local_rank(), ctx.get_local_world_size(), bus_id)
        if cpus is not None:
            logger.info("pinned to %d cpus of a NUMA node", len(cpus))
    return device


def wrap(model, cfg, device, world: int):
    """DDP (fsdp_size 1) or FSDP2/HSDP over a (replicate, shard) mesh of the default process
    group's `world` workers: the whole run's, or under torchft one replica group's (Ray
    Train gives each group its own; the ft engine, driver.ft.replica, sums the gradients
    across groups itself after the backward passes). A world of one: the model as it is."""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    if world == 1:
        return model
    if cfg.parallelism.fsdp_size == 1:
        ids = [device.index] if device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    shard = cfg.parallelism.fsdp_size
    mesh = init_device_mesh(device.type, (world // shard, shard), mesh_dim_names=("dp", "fsdp"))
    for block in getattr(model, "blocks", []):
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    torch.distributed.barrier()
    return model
