"""The preflight suite: every check, run on this machine (inside a pod, or locally).

    python -m runner.preflight --accelerator H200 --gpus 8          # in a pod
    python -m runner.preflight --local-world 2                      # here, CPU path

`run_suite(options)` returns rows; `runner.preflight.entry.main` prints them.
"""

from __future__ import annotations

import os
import socket
import tempfile
from dataclasses import dataclass, field

from catalog import labels
from runner.preflight import host, kernel, nvsmi
from runner.preflight.allreduce import Rendezvous
from runner.preflight.rows import FAIL, SKIP, Row, placed

GROUPS = ["kernel", "nvidia-smi", "host", "matmul", "allreduce"]


@dataclass
class SuiteOptions:
    """What to check and what to expect."""

    accelerator: str | None = None
    """accelerator catalog key (H100, H200); None on a machine without GPUs"""
    gpus: int | None = None
    """GPUs the pod asked for (the count nvidia-smi must show)"""
    shm: str | None = None
    """/dev/shm size the pod asked for (e.g. 250Gi)"""
    writable: list[str] = field(default_factory=lambda: ["/dev/shm", tempfile.gettempdir()])
    """folders that must accept new files (shared mounts, output dirs)"""
    pod: str = field(default_factory=lambda: os.environ.get("POD_NAME", socket.gethostname()))
    node: str = field(
        default_factory=lambda: os.environ.get(labels.NODE_NAME_ENV, socket.gethostname())
    )
    rendezvous: Rendezvous | None = None
    """where the all-reduce meets; None skips it"""
    skip: set[str] = field(default_factory=set)
    """check groups not to run (see GROUPS)"""
    kernel_log: str | None = None
    """kernel log text to parse instead of reading dmesg/journal"""


def _expected(options: SuiteOptions):
    from catalog import accelerator

    return accelerator(options.accelerator, field="--accelerator") if options.accelerator else None


def run_suite(options: SuiteOptions) -> list[Row]:
    """Run every group not skipped; rows carry this pod and node."""
    acc = _expected(options)
    rows: list[Row] = []
    if "kernel" not in options.skip:
        rows += kernel.check(options.kernel_log)
    if "nvidia-smi" not in options.skip:
        rows += nvsmi.check(options.gpus if acc else None)
    if "host" not in options.skip:
        rows += [
            host.memory(acc),
            host.shm(options.shm or (acc.default_shm if acc else None)),
            host.writable(options.writable),
            host.mounts(acc, gpus=options.gpus),
            host.libraries(acc, gpus=options.gpus),
            host.nccl_env(acc, os.environ, options.gpus),
            host.nics(acc, gpus=options.gpus),
        ]
    if "matmul" not in options.skip:
        rows += _guarded("matmul", lambda: _matmul(acc, options))
    if "allreduce" not in options.skip:
        rows += _guarded("allreduce", lambda: _allreduce(acc, options))
    return placed(rows, options.pod, options.node)


def _matmul(acc, options: SuiteOptions) -> list[Row]:
    from runner.preflight import matmul

    return matmul.check(acc.expected.matmul_tflops if acc else None, options.gpus)


def _allreduce(acc, options: SuiteOptions) -> list[Row]:
    from runner.preflight import allreduce

    rdzv = options.rendezvous
    if rdzv is None:
        return [Row("allreduce", SKIP, "no rendezvous given")]
    results, errors, size = allreduce.run(rdzv, options.pod, options.node)
    expected = acc.expected.allreduce_busbw_gbps if acc and rdzv.backend == "nccl" else None
    return allreduce.rows(rdzv, results, errors, size, expected)


def _guarded(check: str, fn) -> list[Row]:
    """A check that crashes is a FAIL row, not a crashed suite."""
    try:
        return fn()
    except Exception as err:  # noqa: BLE001
        return [
            Row(
                check, FAIL, f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
            )
        ]


def local_rendezvous(world: int, backend: str = "gloo") -> Rendezvous:
    """All ranks on this machine: gloo on CPU, nccl across this machine's GPUs."""
    from runner.preflight.allreduce import free_port

    return Rendezvous("127.0.0.1", free_port(), world, 0, world, backend, timeout_s=300)
