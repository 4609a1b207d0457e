"""A small decoder-only language model (GPT-style: learned positions, pre-norm blocks, tied
embedding and output). `loss(model, batch)` is the next-token cross-entropy."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from driver.workloads.nn import Block


class TinyLM(nn.Module):
    """Decoder-only transformer over `vocab_size` tokens and up to `max_len` positions."""

    def __init__(self, vocab_size: int, max_len: int, d_model: int, n_layers: int, n_heads: int,
                 mlp_ratio: int):  # fmt: skip
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Parameter(torch.zeros(1, max_len, d_model))
        self.blocks = nn.ModuleList(
            Block(d_model, n_heads, mlp_ratio, causal=True) for _ in range(n_layers)
        )
        self.norm = nn.LayerNorm(d_model)
        nn.init.normal_(self.embed.weight, std=0.02)
        nn.init.normal_(self.pos, std=0.02)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.pos[:, : tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.norm(x) @ self.embed.weight.T


def loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Mean next-token cross-entropy of a batch of (inputs, targets)."""
    inputs, targets = batch
    logits = model(inputs)
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
