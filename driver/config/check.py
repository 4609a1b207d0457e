"""The layout a run's pod would compose, checked against its shape, before anything starts:

    python -m driver.config.check runs/train/tiny-lm.yaml run.name=tiny-lm ... shape.nodes=2 \
        shape.gpus_per_node=8 shape.accelerator=H200 shape.cpus_per_gpu=26

composes the config exactly as the driver does (driver.config.compose) and plans the
shape's GPUs between training and the auxiliary services (driver.capacity), then prints one
JSON line: world size, FSDP size, replica group size and groups, services (replicas and
GPUs), idle GPUs, devices, backend, data loader. `runner render` runs it for every run that
starts the driver (the runner never imports the driver), so a layout that does not fit the
manifest is refused at render with the driver's own one line. Exit codes: 0, 2 (one line:
the file and the key). Imports neither Ray nor torch.
"""

from __future__ import annotations

import json
import sys

from catalog.errors import InputError

USAGE = "usage: python -m driver.config.check CONFIG.yaml [key=value ...]"


def layout_of(cfg) -> dict:
    """The planned layout of a composed config with a shape (InputError when it does not
    fit: no training group beside the services, too few replica groups for ft, a dataset
    smaller than one global batch)."""
    from driver import capacity
    from driver.config.compose import check_batch

    shape, par = cfg.shape, cfg.parallelism
    services = capacity.services_of(cfg, use_gpu=True)
    try:
        plan = capacity.plan(shape.nodes, shape.gpus_per_node, services,
                             par.replica_group_size, max_workers=par.workers)  # fmt: skip
    except capacity.CapacityError as err:
        raise InputError(None, "parallelism", str(err)) from None
    check_batch(cfg, plan.world_size)
    topo = plan.topology(par.fsdp_size)
    if cfg.ft.enabled and topo.groups < cfg.ft.min_replicas:
        message = f"{topo.groups} replica groups planned, fewer than ft.min_replicas"
        raise InputError(None, "ft.min_replicas", f"{message}={cfg.ft.min_replicas}")
    return {
        "nodes": shape.nodes,
        "gpus_per_node": shape.gpus_per_node,
        "accelerator": shape.accelerator,
        "world_size": plan.world_size,
        "fsdp_size": par.fsdp_size,
        "replica_group_size": par.replica_group_size,
        "replica_groups": topo.groups,
        "services": {
            name: {"replicas": plan.replicas[name], "gpus": plan.service_slots[name]}
            for name in plan.replicas
        },
        "idle_gpus": plan.idle_slots,
        "device": par.device,
        "backend": par.backend,
        "cpus_per_worker": par.cpus_per_worker,
        "data_loader": cfg.data.loader,
        "ft": cfg.ft.enabled,
    }


def main(argv: list[str] | None = None) -> int:
    from driver.config.compose import compose

    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr if not args else sys.stdout)
        return 2 if not args else 0
    try:
        cfg, _ = compose(args[0], args[1:])
        if not cfg.shape.nodes:
            raise InputError(args[0], "shape", "no shape to check against (shape.nodes=0)")
        print(json.dumps(layout_of(cfg), sort_keys=True))
    except InputError as err:
        err.source = err.source or args[0]
        print(f"error: {err.line()}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
