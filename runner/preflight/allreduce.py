"""All-reduce across every pod of a run with torch.distributed: NCCL on GPUs, gloo on CPU.

Each pod starts one process per GPU (one on CPU); all meet at a TCP rendezvous on the
first pod. Bus bandwidth uses the nccl-tests formula, busbw = size / time * 2(n-1)/n,
with the time of the slowest rank (the collective ends when it does), and the sum is
checked. The pod holding rank 0 reports the whole-world row and names the slowest rank.
"""

from __future__ import annotations

import multiprocessing
import socket
import time
from dataclasses import asdict, dataclass
from datetime import timedelta

from runner.preflight.matmul import verdict
from runner.preflight.rows import FAIL, PASS, SKIP, Row

CPU_SIZE = 8 << 20  # bytes per all-reduce on CPU
GPU_SIZE = 1 << 30
ITERS = {"gloo": 5, "nccl": 20}


@dataclass(frozen=True)
class Rendezvous:
    """Where and how the ranks of the all-reduce meet."""

    master_addr: str
    """address of the first pod (rank 0)"""
    master_port: int
    """TCP port of the rendezvous on the first pod"""
    world_size: int
    """ranks in total (GPUs of all pods, or pods on CPU)"""
    rank_base: int = 0
    """global rank of this pod's first process"""
    local_procs: int = 1
    """processes in this pod (its GPUs, or 1 on CPU)"""
    backend: str = "gloo"
    """nccl on GPUs, gloo on CPU"""
    timeout_s: float = 300.0
    """how long ranks wait for each other"""


@dataclass(frozen=True)
class RankResult:
    rank: int
    pod: str
    node: str
    seconds: float
    """mean seconds per all-reduce on this rank"""
    correct: bool


def bus_bandwidth(size_bytes: int, seconds: float, world: int) -> float:
    """nccl-tests bus bandwidth of an all-reduce, in GB/s."""
    return size_bytes / seconds / 1e9 * (2 * (world - 1) / world)


def slowest(results: list[RankResult]) -> RankResult:
    return max(results, key=lambda r: (r.seconds, r.rank))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(local_rank: int, rdzv: Rendezvous, size: int, pod: str, node: str, queue) -> None:
    import torch
    import torch.distributed as dist

    rank = rdzv.rank_base + local_rank
    try:
        device = torch.device("cpu")
        if rdzv.backend == "nccl":
            device = torch.device("cuda", local_rank)
            torch.cuda.set_device(device)
        dist.init_process_group(
            rdzv.backend,
            init_method=f"tcp://{rdzv.master_addr}:{rdzv.master_port}",
            rank=rank,
            world_size=rdzv.world_size,
            timeout=timedelta(seconds=rdzv.timeout_s),
        )
        check = torch.full((4,), float(rank + 1), device=device)
        dist.all_reduce(check)
        want = rdzv.world_size * (rdzv.world_size + 1) / 2
        correct = bool(torch.all(check == want))
        data = torch.ones(size // 4, dtype=torch.float32, device=device)
        iters = ITERS[rdzv.backend]
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        dist.all_reduce(data)
        sync()
        total = 0.0
        for _ in range(iters):
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(data)
            sync()
            total += time.perf_counter() - start
        mine = RankResult(rank, pod, node, total / iters, correct)
        everyone: list = [None] * rdzv.world_size
        dist.all_gather_object(everyone, asdict(mine))
        queue.put(("ok", [RankResult(**r) for r in everyone]))
    except Exception as err:  # noqa: BLE001 - reported as a FAIL row by the parent
        queue.put(("error", f"rank {rank}: {type(err).__name__}: {str(err).splitlines()[0]}"))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _forked_rank(local_rank: int, *args) -> None:
    """A gloo rank in a forked child. The parent's OpenMP thread pool does not survive
    fork (libgomp hangs at the next parallel region), so the child computes on one thread."""
    import torch

    torch.set_num_threads(1)
    _rank(local_rank, *args)


def run(rdzv: Rendezvous, pod: str = "", node: str = "", size: int | None = None):
    """Run this pod's ranks; returns (all ranks' results, errors, bytes per all-reduce).

    NCCL: every rank in a spawned process (CUDA cannot be forked, and NCCL's watchdog may
    abort a process that hangs). gloo: the first local rank runs in this process and the
    others are forked, so no process starts an interpreter or imports torch again.
    """
    import torch  # noqa: F401 - imported before forking, so children inherit it

    size = size or (GPU_SIZE if rdzv.backend == "nccl" else CPU_SIZE)
    gloo = rdzv.backend == "gloo"
    ctx = multiprocessing.get_context("fork" if gloo else "spawn")
    queue = ctx.Queue()
    args = (rdzv, size, pod, node, queue)
    here, target = (1, _forked_rank) if gloo else (0, _rank)
    procs = [ctx.Process(target=target, args=(i, *args)) for i in range(here, rdzv.local_procs)]
    for proc in procs:
        proc.start()
    if here:
        _rank(0, *args)
    answers = []
    deadline = time.monotonic() + rdzv.timeout_s + 120
    while len(answers) < rdzv.local_procs and time.monotonic() < deadline:
        try:
            answers.append(queue.get(timeout=1))
        except Exception:  # noqa: BLE001 - queue.Empty: check the processes are alive
            if not any(p.is_alive() for p in procs) and queue.empty():
                break
    for proc in procs:
        proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()
    errors = [a[1] for a in answers if a[0] == "error"]
    results = next((a[1] for a in answers if a[0] == "ok"), [])
    if len(answers) < rdzv.local_procs:
        errors.append(f"{rdzv.local_procs - len(answers)} rank(s) died without an answer")
    return results, errors, size


def rows(rdzv: Rendezvous, results, errors, size, expected_gbps: float | None) -> list[Row]:
    """This pod's row, plus the whole-world row on the pod holding rank 0."""
    if errors:
        return [Row("allreduce", FAIL, "; ".join(errors))]
    mine = [r for r in results if rdzv.rank_base <= r.rank < rdzv.rank_base + rdzv.local_procs]
    own = max(r.seconds for r in mine)
    ranks = f"rank {mine[0].rank}" if len(mine) == 1 else f"ranks {mine[0].rank}-{mine[-1].rank}"
    own_bw = bus_bandwidth(size, own, rdzv.world_size)
    out = [
        Row(
            "allreduce",
            PASS,
            f"{ranks}: {own_bw:.2f} GB/s bus bandwidth ({rdzv.backend})",
            data={"busbw_gbps": own_bw, "ranks": [r.rank for r in mine]},
        )
    ]
    if rdzv.rank_base != 0:
        return out
    if not all(r.correct for r in results):
        bad = [r.rank for r in results if not r.correct]
        return out + [Row("allreduce-world", FAIL, f"wrong sum on ranks {bad}")]
    if rdzv.world_size == 1:  # no traffic: bus bandwidth is zero by definition
        return out + [Row("allreduce-world", SKIP, "one rank: nothing to exchange")]
    worst = slowest(results)
    busbw = bus_bandwidth(size, worst.seconds, rdzv.world_size)
    where = f"slowest rank {worst.rank} ({worst.pod or '-'} on {worst.node or '-'})"
    data = {
        "busbw_gbps": busbw,
        "slowest_rank": worst.rank,
        "slowest_node": worst.node,
        "seconds": {r.rank: r.seconds for r in results},
    }
    detail = f"{rdzv.world_size} ranks, {busbw:.2f} GB/s bus bandwidth, {where}"
    if not expected_gbps:
        return out + [
            Row("allreduce-world", PASS, f"{detail}; no expected figure on CPU", data=data)
        ]
    result = verdict(busbw, expected_gbps)
    detail += f", {busbw / expected_gbps:.0%} of expected {expected_gbps:.0f} GB/s"
    return out + [Row("allreduce-world", result, detail, data=data)]
