"""`python -m runner.preflight`: run the suite here and print the table (or JSON lines).

Runs inside a run's pods (`runner preflight RUN` execs it there), as the node-check Job
(`runner check NODE`), and locally (`runner preflight --local`). Exit status 1 when any
check FAILs, 2 on bad arguments.

    python -m runner.preflight --accelerator H200 --gpus 8 \
        --master-addr 10.4.0.12 --master-port 29533 --world-size 16 --rank-base 8
    python -m runner.preflight --local-world 2 --skip kernel
"""

from __future__ import annotations

import argparse
import sys

from runner.preflight.rows import Row, failed, summary, table
from runner.preflight.suite import GROUPS, SuiteOptions, local_rendezvous, run_suite


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m runner.preflight", description=__doc__.split("\n")[0]
    )
    p.add_argument("--accelerator", help="accelerator catalog key (H100, H200)")
    p.add_argument("--gpus", type=int, help="GPUs this pod has")
    p.add_argument("--shm", help="/dev/shm size the pod asked for, e.g. 250Gi")
    p.add_argument("--writable", action="append", help="folder that must be writable (repeat)")
    p.add_argument("--pod", help="pod name to report (default $POD_NAME or host name)")
    p.add_argument("--node", help="node name to report (default $NODE_NAME or host name)")
    p.add_argument("--master-addr", help="rendezvous address (the first pod)")
    p.add_argument("--master-port", type=int, default=29533)
    p.add_argument("--world-size", type=int, help="ranks across all pods")
    p.add_argument(
        "--rank-base", type=int, default=0, help="global rank of this pod's first process"
    )
    p.add_argument("--local-procs", type=int, help="processes here (default: GPUs, or 1 on CPU)")
    p.add_argument("--local-world", type=int, help="all-reduce among this many local processes")
    p.add_argument("--timeout", type=float, default=300.0, help="rendezvous timeout, seconds")
    p.add_argument("--skip", default="", help=f"comma-separated groups to skip: {','.join(GROUPS)}")
    p.add_argument("--json", action="store_true", help="print one JSON row per line")
    return p


def options_from(args: argparse.Namespace, error) -> SuiteOptions:
    from runner.preflight.allreduce import Rendezvous

    skip = {s for s in args.skip.split(",") if s}
    if unknown := skip - set(GROUPS):
        error(f"--skip: unknown group(s) {sorted(unknown)} (known: {', '.join(GROUPS)})")
    options = SuiteOptions(accelerator=args.accelerator, gpus=args.gpus, shm=args.shm, skip=skip)
    if args.writable:
        options.writable = args.writable
    options.pod = args.pod or options.pod
    options.node = args.node or options.node
    gpu = bool(args.accelerator) and _cuda_count() > 0
    local = args.local_procs or (min(_cuda_count(), args.gpus or 99) if gpu else 1)
    if args.local_world:
        options.rendezvous = local_rendezvous(args.local_world, "nccl" if gpu else "gloo")
    elif args.master_addr:
        if not args.world_size:
            error("--world-size is required with --master-addr")
        options.rendezvous = Rendezvous(
            args.master_addr,
            args.master_port,
            args.world_size,
            args.rank_base,
            local,
            "nccl" if gpu else "gloo",
            args.timeout,
        )
    return options


def _cuda_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def emit(rows: list[Row], as_json: bool) -> None:
    if as_json:
        for row in rows:
            print(row.to_json())
    else:
        print(table(rows))
        print(summary(rows))


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    try:
        options = options_from(args, p.error)
        rows = run_suite(options)
    except Exception as err:  # an InputError (unknown accelerator) is a usage error
        from catalog import InputError

        if isinstance(err, InputError):
            print(f"error: {err.line()}", file=sys.stderr)
            return 2
        raise
    emit(rows, args.json)
    return 1 if failed(rows) else 0


if __name__ == "__main__":
    sys.exit(main())
