"""One DiLoCo learner as a plain process: the reference LM, AdamW inside, Learner outside.

    python -m tests.support.diloco_trainer --learner a --index 0 --learners 2 \
        --address tcp://127.0.0.1:5555 --keys KEYS --steps 200 --sync-every 20 \
        [--mode barrier|decoupled --merge delta|replace --compression bf16 --fragments 1]
        --out DIR

Learner `index` of `learners` trains on its own slot of each step of the generated corpus
(`driver.data.feed.Feed`, the driver's batches, one slot per learner).
`DIR/<learner>.jsonl` gets one line per step (step, loss, round); `DIR/<learner>.json` a
summary with the loss of the final weights on held-out text. Without `--address` it trains
alone (no DiLoCo). The driver's loop calls the same `Learner` (docs/diloco.md); this file
is for local experiments, tests and the benchmark.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from types import SimpleNamespace

import torch

from driver import optim
from driver.data.feed import Feed, to_torch
from driver.data.stages import default_collate
from driver.diloco.learner import LearnerConfig, make
from driver.workloads import build
from driver.workloads.text import TextDataset


def model_args(p: argparse.ArgumentParser) -> None:
    """Options of the model, data and inner optimizer (shared with the benchmark)."""
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch", type=int, default=8, help="sequences per step (per learner)")
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--step-delay", type=float, default=0.0, help="sleep per step (slow learner)")


def workload(args: argparse.Namespace):
    torch.manual_seed(args.seed)
    model_cfg = SimpleNamespace(
        kind="lm", d_model=args.d_model, n_layers=args.layers, n_heads=4, mlp_ratio=4
    )
    data_cfg = SimpleNamespace(size=2048, seq_len=args.seq_len, seed=1234)
    return build(model_cfg, data_cfg)


def inner_optimizer(model, args: argparse.Namespace):
    cfg = SimpleNamespace(
        lr=args.lr,
        betas=(0.9, 0.95),
        eps=1e-8,
        weight_decay=0.1,
        warmup_steps=max(1, args.steps // 20),
        schedule="cosine",
        min_lr_ratio=0.1,
    )
    return optim.build(model, cfg, args.steps)


def eval_loss(model, loss_fn, seq_len: int, batches: int = 4) -> float:
    """Mean loss on held-out text (another seed of the same generator)."""
    data = TextDataset(batches * 16, seq_len, seed=99)
    with torch.no_grad():
        losses = [
            loss_fn(model, to_torch(default_collate([data[i * 16 + j] for j in range(16)]))).item()
            for i in range(batches)
        ]
    return sum(losses) / len(losses)


def peak_push(pushes: list[dict]) -> int:
    """The most bytes pushed at one step (all fragments due at that step together)."""
    per_step: dict[int, int] = {}
    for push in pushes:
        per_step[push["step"]] = per_step.get(push["step"], 0) + push["bytes"]
    return max(per_step.values(), default=0)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m tests.support.diloco_trainer", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--learner", default="a")
    p.add_argument("--index", type=int, default=0)
    p.add_argument("--learners", type=int, default=1)
    p.add_argument("--address")
    p.add_argument("--keys")
    p.add_argument("--sync-every", type=int, default=20)
    p.add_argument("--mode", default="barrier")
    p.add_argument("--merge", default="delta")
    p.add_argument("--compression", default="bf16", help="bf16, fp16, int8 or fp32")
    p.add_argument("--barrier-timeout", type=float, default=120.0)
    p.add_argument("--fragments", type=int, default=1, help="streaming: fragments of the model")
    p.add_argument("--out", required=True)
    model_args(p)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    work = workload(args)
    model, loss_fn = work.model, work.loss
    optimizer, scheduler = inner_optimizer(model, args)
    learner = None
    if args.address:
        try:
            cfg = LearnerConfig(
                args.address, args.learner, args.keys, args.sync_every, args.mode, args.merge,
                args.compression, *[args.barrier_timeout] * 3, fragments=args.fragments,
            )  # fmt: skip
            learner = make(cfg, model)
        except (OSError, ValueError) as err:
            print(f"error: learner {args.learner}: {err}")
            return 2
        learner.start(model)
    feed = Feed(work.dataset, args.batch, args.learners, args.seed, rank=args.index)
    source = (feed.batch(step, args.index) for step in range(1 << 62))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    with open(out / f"{args.learner}.jsonl", "w", buffering=1) as log:
        for step in range(args.steps):
            loss = loss_fn(model, next(source))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            if learner:
                learner.after_step(step, model)
            if args.step_delay:
                time.sleep(args.step_delay)
            round_ = learner.round if learner else -1
            log.write(json.dumps({"step": step, "loss": loss.item(), "round": round_}) + "\n")
    if learner:
        learner.finish(model)
    summary = {
        "learner": args.learner,
        "steps": args.steps,
        "wall_s": time.time() - start,
        "final_eval": eval_loss(model, loss_fn, args.seq_len),
        "merges": learner.merges if learner else [],
        "round": learner.round if learner else -1,
        "sent_bytes": learner.sent_bytes if learner else 0,
        "peak_push_bytes": peak_push(learner.pushes) if learner else 0,
        "wait_s": learner.wait_s if learner else 0.0,
    }
    (out / f"{args.learner}.json").write_text(json.dumps(summary))
    torch.save(dict(model.named_parameters()), out / f"{args.learner}.pt")
    if learner:
        learner.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
