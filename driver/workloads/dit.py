"""A small DiT-style denoiser: patchify, transformer blocks conditioned on the noise level
(and, with `cond_dim`, on an embedding of the clean image from a frozen encoder) through
adaLN-zero, unpatchify. `loss(model, batch)` adds Gaussian noise at a random level (cosine
schedule) and scores the predicted noise with mean squared error; a batch is the images, or
(images, embeddings) when the model is conditioned. `ConditionEncoder` is the frozen
encoder the `encoder` auxiliary service runs (driver/aux/services/encoder.py)."""

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
                 n_layers: int, n_heads: int, cond_dim: int = 0):  # fmt: skip
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
        self.cond = nn.Linear(cond_dim, d_model) if cond_dim else None

    def forward(self, x: torch.Tensor, t: torch.Tensor, emb: torch.Tensor | None = None):
        batch = x.shape[0]
        h = self.embed(x).flatten(2).transpose(1, 2) + self.pos
        cond = self.time(timestep_embedding(t, h.shape[-1]))
        if self.cond is not None and emb is not None:  # no embeddings: unconditioned
            cond = cond + self.cond(emb.to(cond.dtype))
        for block in self.blocks:
            h = block(h, cond)
        y = self.out(self.norm(h))  # (batch, grid*grid, p*p*c)
        y = y.view(batch, self.grid, self.grid, self.channels, self.patch, self.patch)
        return y.permute(0, 3, 1, 4, 2, 5).reshape(x.shape)


def loss(model: nn.Module, batch) -> torch.Tensor:
    """Noise-prediction MSE at uniformly drawn noise levels."""
    images, emb = batch if isinstance(batch, tuple | list) else (batch, None)
    t = torch.rand(images.shape[0], device=images.device)
    return denoise_loss(model, images, t, torch.randn_like(images), emb)


def denoise_loss(model, images, t, noise, emb=None) -> torch.Tensor:
    """Noise-prediction MSE at given noise levels `t` and noise (fixed for evaluation)."""
    alpha = torch.cos(t * math.pi / 2)[:, None, None, None]
    sigma = torch.sin(t * math.pi / 2)[:, None, None, None]
    args = (alpha * images + sigma * noise, t) + ((emb,) if emb is not None else ())
    return F.mse_loss(model(*args).float(), noise)


class ConditionEncoder(nn.Module):
    """A frozen image encoder (two strided convolutions, pooled, projected to `dim`, unit
    length), its weights drawn from `seed`: the same on every worker that builds it."""

    def __init__(self, channels: int, dim: int, seed: int = 0):
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.net = nn.Sequential(
            nn.Conv2d(channels, 32, 3, stride=2, padding=1), nn.GELU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.GELU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, dim),
        )  # fmt: skip
        with torch.no_grad():
            for param in self.parameters():
                param.copy_(torch.randn(param.shape, generator=generator) * 0.3)
        self.requires_grad_(False).eval()

    @torch.no_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.net(images.float()), dim=-1)
