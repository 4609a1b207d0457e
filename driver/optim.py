"""Optimizer and learning-rate schedule of the training loop.

`lr_factor(step, ...)` is the pure schedule (linear warm-up, then cosine decay to
`min_lr_ratio` at the last step, or constant); `build(model, cfg, steps)` returns AdamW with
weight decay on matrices only, and a LambdaLR that follows the schedule.
"""

from __future__ import annotations

import math


def lr_factor(
    step: int, warmup: int, total: int, schedule: str = "cosine", min_ratio: float = 0.1
) -> float:
    """Multiplier of the peak learning rate for optimizer step `step` (0-based)."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    if schedule == "constant":
        return 1.0
    span = max(1, total - warmup - 1)
    progress = min(1.0, max(0.0, (step - warmup) / span))
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def build(model, cfg, steps: int):
    """AdamW (decay on >=2-D parameters only) and its LambdaLR scheduler."""
    import torch

    decay = [p for p in model.parameters() if p.requires_grad and p.ndim >= 2]
    other = [p for p in model.parameters() if p.requires_grad and p.ndim < 2]
    groups = [
        {"params": decay, "weight_decay": cfg.weight_decay},
        {"params": other, "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda step: lr_factor(step, cfg.warmup_steps, steps, cfg.schedule, cfg.min_lr_ratio),
    )
    return optimizer, scheduler
