"""Transformer pieces shared by the reference models: attention, MLP, and a pre-norm block
with optional adaLN modulation (the DiT conditioning). Used by `lm.py` and `dit.py`."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Attention(nn.Module):
    """Multi-head self-attention through `scaled_dot_product_attention`."""

    def __init__(self, d_model: int, n_heads: int, causal: bool):
        super().__init__()
        self.n_heads, self.causal = n_heads, causal
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        qkv = self.qkv(x).view(batch, length, 3, self.n_heads, width // self.n_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.out(y.transpose(1, 2).reshape(batch, length, width))


class Block(nn.Module):
    """Pre-norm transformer block; with `cond_dim` the norms are modulated (adaLN-zero)."""

    def __init__(self, d_model: int, n_heads: int, mlp_ratio: int, causal: bool, cond_dim=0):
        super().__init__()
        affine = cond_dim == 0
        self.norm1 = nn.LayerNorm(d_model, elementwise_affine=affine)
        self.norm2 = nn.LayerNorm(d_model, elementwise_affine=affine)
        self.attn = Attention(d_model, n_heads, causal)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, mlp_ratio * d_model),
            nn.GELU(),
            nn.Linear(mlp_ratio * d_model, d_model),
        )
        self.modulation = nn.Linear(cond_dim, 6 * d_model) if cond_dim else None
        if self.modulation is not None:
            nn.init.zeros_(self.modulation.weight)
            nn.init.zeros_(self.modulation.bias)

    def forward(self, x: torch.Tensor, cond: torch.Tensor | None = None) -> torch.Tensor:
        if self.modulation is None:
            x = x + self.attn(self.norm1(x))
            return x + self.mlp(self.norm2(x))
        shift1, scale1, gate1, shift2, scale2, gate2 = self.modulation(cond)[:, None].chunk(6, -1)
        x = x + gate1 * self.attn(self.norm1(x) * (1 + scale1) + shift1)
        return x + gate2 * self.mlp(self.norm2(x) * (1 + scale2) + shift2)
