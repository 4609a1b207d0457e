"""DiLoCo against synchronous data parallel over the same slow link, same model and tokens.

    sudo .venv/bin/python scripts/bench/diloco_bench.py [--steps 400 --sync-every 20
        --rate 30mbit --mode barrier --learners 2 --compression int8 --outer-momentum 0.5
        --d-model 64 --batch 8 --seed 0]

Both runs train the reference LM (driver.workloads, the tiny config of
tests.support.diloco_trainer) for `--steps` steps on `--learners` shards of the corpus, so they see
the same tokens, with the same inner AdamW and its schedule (warm-up, cosine over the run).
400 steps by default: the tiny model is still dropping fast at 200 (data parallel's loss
0.89 there, 0.82 at 400), and comparing mid-descent measures how soon each run gets there,
not where it ends (docs/diloco.md, "The benchmark"). Every process sits in its own network
namespace; each namespace reaches the others through a hub over a veth limited to `--rate`
by `tc tbf` (tests.support.slowlink; no added delay, this kernel has no netem).
- DiLoCo: `--learners` learner processes (AdamW inside, a sync every H = `--sync-every`
  steps, int8 pseudo-gradients and deltas by default; outer Nesterov lr 0.7 and momentum
  0.5, which suits the twenty rounds of the default run better than the 0.9 meant for many
  rounds) and the synchronizer in a namespace of its own.
- Data parallel: as many processes, gloo all_reduce of the flattened gradients every step
  (what DDP does on one bucket) across the same kind of link, then the same AdamW step.
Ratios printed (goals in brackets):
  bytes ratio = bytes sent per inner step, DiLoCo / data parallel           [<= 1/H]
  loss ratio  = held-out loss of the final weights, DiLoCo / data parallel  [<= 1.05]
                (DiLoCo's final weights: the synchronizer's shared weights after the
                last round, which merges at the final step; `--steps` is a multiple of H)
  wall ratio  = training wall time to the same tokens, DiLoCo / DP          [<= 0.5]
Wall time is each run's slowest process from its first step to its last (process start-up
and imports excluded on both sides). Needs root for the namespaces.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from driver.diloco import keys  # noqa: E402
from tests import support  # noqa: E402
from tests.support import diloco_trainer as trainer  # noqa: E402
from tests.support import slowlink  # noqa: E402
from tests.support.diloco_local import learner_cmd, learner_names  # noqa: E402

PORT = "29517"  # inside namespaces made for this run only


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--learners", type=int, default=2)
    p.add_argument("--sync-every", type=int, default=20)
    p.add_argument("--mode", default="barrier", choices=["barrier", "decoupled"])
    p.add_argument("--rate", default="30mbit", help="tc tbf rate of each link")
    p.add_argument("--compression", default="int8", help="DiLoCo's: int8, bf16, fp16, fp32")
    p.add_argument("--outer-lr", type=float, default=0.7)
    p.add_argument("--outer-momentum", type=float, default=0.5, help="0.5 suits few rounds")
    p.add_argument("--fragments", type=int, default=1, help="DiLoCo's streaming fragments")
    p.add_argument("--role", choices=["bench", "dp"], default="bench", help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--master", default="", help=argparse.SUPPRESS)
    p.add_argument("--out", default="", help=argparse.SUPPRESS)
    trainer.model_args(p)
    p.set_defaults(steps=400)
    args = p.parse_args(argv)
    if args.role == "bench" and args.steps % args.sync_every:
        p.error("--steps must be a multiple of --sync-every (the last round merges at the end)")
    model = [
        "--steps",
        str(args.steps),
        "--batch",
        str(args.batch),
        "--seq-len",
        str(args.seq_len),
        "--d-model",
        str(args.d_model),
        "--layers",
        str(args.layers),
        "--lr",
        str(args.lr),
        "--seed",
        str(args.seed),
    ]
    return args, model


def dp_worker(args: argparse.Namespace) -> None:
    """One data-parallel rank: gloo all_reduce of the gradients every step."""
    import torch
    import torch.distributed as dist

    from driver.data.feed import Feed

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR=args.master, MASTER_PORT=PORT, GLOO_SOCKET_IFNAME=slowlink.IFACE)
    dist.init_process_group("gloo", rank=args.rank, world_size=args.learners)
    work = trainer.workload(args)
    model, loss_fn = work.model, work.loss
    optimizer, scheduler = trainer.inner_optimizer(model, args)
    params = [p for p in model.parameters()]
    feed = Feed(work.dataset, args.batch, args.learners, args.seed, rank=args.rank)
    source = (feed.batch(step, args.rank) for step in range(1 << 62))
    dist.barrier()
    start = time.time()
    for _ in range(args.steps):
        loss = loss_fn(model, next(source))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        dist.all_reduce(flat)
        flat /= args.learners
        offset = 0
        for p in params:
            p.grad.copy_(flat[offset : offset + p.numel()].view_as(p))
            offset += p.numel()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        scheduler.step()
    wall = time.time() - start
    result = {"wall_s": wall, "final_eval": trainer.eval_loss(model, loss_fn, args.seq_len)}
    Path(args.out, f"dp-{args.rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


def run_dp(args, model: list[str], out: Path) -> dict:
    names = [f"r{i}" for i in range(args.learners)]
    with slowlink.SlowLink(names, rate=args.rate) as link:
        me = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--role",
            "dp",
            "--master",
            link.address("r0"),
            "--learners",
            str(args.learners),
            "--out",
            str(out),
            *model,
        ]
        procs = [
            subprocess.Popen(link.wrap(n, [*me, "--rank", str(i)])) for i, n in enumerate(names)
        ]
        if any(proc.wait() for proc in procs):
            raise SystemExit("data-parallel run failed")
        sent = link.sent_bytes()
    results = [json.loads((out / f"dp-{i}.json").read_text()) for i in range(args.learners)]
    return {
        "sent": sent,
        "wall_s": max(r["wall_s"] for r in results),
        "final_eval": results[0]["final_eval"],
    }


def sync_settings(args: argparse.Namespace) -> list[str]:
    """The synchronizer's options from the benchmark's."""
    return ["--compression", args.compression, "--outer-lr", str(args.outer_lr),
            "--outer-momentum", str(args.outer_momentum), "--expect",
            ",".join(learner_names(args.learners))]  # fmt: skip


def run_diloco(args, model: list[str], out: Path) -> dict:
    names = learner_names(args.learners)
    keys.generate(out / "keys", names)
    with slowlink.SlowLink(["sync", *names], rate=args.rate) as link:
        address = f"tcp://{link.address('sync')}:{PORT}"
        sync_cmd = [
            sys.executable,
            "-m",
            "driver.diloco.synchronizer",
            "--bind",
            f"tcp://*:{PORT}",
            "--keys",
            str(out / "keys"),
            "--state",
            str(out / "state"),
            "--endpoint-file",
            str(out / "endpoint"),
            *sync_settings(args),
        ]
        sync = subprocess.Popen(
            link.wrap("sync", sync_cmd),
            stdout=open(out / "sync.log", "w"),
            stderr=subprocess.STDOUT,
        )
        while not (out / "endpoint").exists():
            if sync.poll() is not None:
                raise SystemExit(f"synchronizer failed: {(out / 'sync.log').read_text()}")
            time.sleep(0.1)
        extra = [
            "--sync-every",
            str(args.sync_every),
            "--mode",
            args.mode,
            "--compression",
            args.compression,
            "--fragments",
            str(args.fragments),
            *model,
        ]
        procs = [
            subprocess.Popen(
                link.wrap(n, learner_cmd(n, i, len(names), address, out, extra)), env=support.env()
            )
            for i, n in enumerate(names)
        ]
        codes = [proc.wait() for proc in procs]
        sent = link.sent_bytes()
        sync.terminate()
        sync.wait(30)
    if any(codes):
        raise SystemExit("DiLoCo run failed")
    results = [json.loads((out / f"{n}.json").read_text()) for n in names]
    return {
        "sent": sent,
        "wall_s": max(r["wall_s"] for r in results),
        "final_eval": shared_loss(args, out / "state"),
        "learner_eval": results[0]["final_eval"],
        "round": results[0]["round"],
        "peak": max(r["peak_push_bytes"] for r in results),
    }


def shared_loss(args: argparse.Namespace, state_dir: Path) -> float:
    """Held-out loss of the synchronizer's final shared weights (every fragment's)."""
    import torch

    from driver.diloco import state

    work = trainer.workload(args)
    folders = [state_dir, *(state_dir / f"fragment-{f}" for f in range(1, args.fragments))]
    shared = {}
    for folder in folders:
        saved = state.load(folder)
        if saved is None:
            raise SystemExit(f"no synchronizer state in {folder}")
        shared.update(saved.shared)
    with torch.no_grad():
        for name, param in work.model.named_parameters():
            param.copy_(shared[name])
    return trainer.eval_loss(work.model, work.loss, args.seq_len)


def main(argv: list[str] | None = None) -> int:
    args, model = parse_args(argv)
    if args.role == "dp":
        dp_worker(args)
        return 0
    reason = slowlink.reason_unavailable()
    if reason:
        print(f"cannot run: {reason}")
        return 1
    with tempfile.TemporaryDirectory(prefix="diloco-bench-") as tmp:
        dp = run_dp(args, model, Path(tmp))
        dl = run_diloco(args, model, Path(tmp))
    h, steps = args.sync_every, args.steps
    print(
        f"model d_model={args.d_model} layers={args.layers}; {args.learners} x {steps} steps x "
        f"{args.batch} x {args.seq_len} tokens; link {args.rate} per hop; H={h}, {args.mode}, "
        f"{args.compression}, outer lr {args.outer_lr} momentum {args.outer_momentum}, "
        f"{args.fragments} fragment(s)"
    )
    print(
        f"data parallel: {dp['sent'] / steps / 1e3:.1f} kB/step, loss {dp['final_eval']:.4f}, "
        f"{dp['wall_s']:.1f} s"
    )
    print(
        f"DiLoCo:        {dl['sent'] / steps / 1e3:.1f} kB/step, loss {dl['final_eval']:.4f} "
        f"(shared weights; a learner's {dl['learner_eval']:.4f}), "
        f"{dl['wall_s']:.1f} s, {dl['round']} rounds, {args.fragments} fragment(s), largest "
        f"push {dl['peak'] / 1e3:.1f} kB"
    )
    print(f"bytes ratio {dl['sent'] / dp['sent']:.4f} [goal <= 1/H = {1 / h:.4f}]")
    print(f"loss ratio  {dl['final_eval'] / dp['final_eval']:.4f} [goal <= 1.05]")
    print(f"wall ratio  {dl['wall_s'] / dp['wall_s']:.4f} [goal <= 0.5]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
