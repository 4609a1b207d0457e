"""A small DiT-style denoiser: patchify, transformer blocks conditioned on the noise level
through adaLN-zero, unpatchify. `loss(model, batch)` adds Gaussian noise at a random level
(cosine schedule) and scores the predicted noise with mean squared error."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from driver.workloads.nn import Block


def timestep_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal embedding of noise levels t in [0, 1]."""
    freqs = torch.exp(-math.log(10_000) * torch.arange(dim // 2, device=t.device) / (dim // 2))
    angles = t[:, None] * 1000 * freqs[None]
    return torch.cat([angles.cos(), angles.sin()], dim=-1)


class TinyDiT(nn.Module):
    """Predicts the noise in a (channels, size, size) image at noise level t."""

    def __init__(self, image_size: int, channels: int, patch_size: int, d_model: int,
                 n_layers: int, n_heads: int):  # fmt: skip
        super().__init__()
        self.patch, self.channels = patch_size, channels
        self.grid = image_size // patch_size
        self.embed = nn.Conv2d(channels, d_model, patch_size, stride=patch_size)
        self.pos = nn.Parameter(torch.randn(1, self.grid**2, d_model) * 0.02)
        self.time = nn.Sequential(
            nn.Linear(d_model, d_model), nn.SiLU(), nn.Linear(d_model, d_model)
        )
        self.blocks = nn.ModuleList(
            Block(d_model, n_heads, 4, causal=False, cond_dim=d_model) for _ in range(n_layers)
        )
        self.norm = nn.LayerNorm(d_model)
        self.out = nn.Linear(d_model, patch_size * patch_size * channels)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        batch = x.shape[0]
        h = self.embed(x).flatten(2).transpose(1, 2) + self.pos
        cond = self.time(timestep_embedding(t, h.shape[-1]))
        for block in self.blocks:
            h = block(h, cond)
        y = self.out(self.norm(h))  # (batch, grid*grid, p*p*c)
        y = y.view(batch, self.grid, self.grid, self.channels, self.patch, self.patch)
        return y.permute(0, 3, 1, 4, 2, 5).reshape(x.shape)


def loss(model: nn.Module, images: torch.Tensor) -> torch.Tensor:
    """Noise-prediction MSE at uniformly drawn noise levels."""
    t = torch.rand(images.shape[0], device=images.device)
    alpha = torch.cos(t * math.pi / 2)[:, None, None, None]
    sigma = torch.sin(t * math.pi / 2)[:, None, None, None]
    noise = torch.randn_like(images)
    predicted = model(alpha * images + sigma * noise, t)
    return F.mse_loss(predicted.float(), noise)
