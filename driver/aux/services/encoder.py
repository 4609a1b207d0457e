"""The DiT's frozen conditioning encoder as an auxiliary service.

Method `encode`: payload `{"images": float32 array (batch, channels, H, W)}` -> reply
`{"embeddings": float32 array (batch, dim)}` (unit length). The encoder's weights come from
`seed`, so every worker (and the evaluator, which embeds its held-out images itself) has
the same one. `ready()` encodes a blank image and reports `{"dim": dim}`: the training
ranks size the model's conditioning input from it. `device: auto` runs on the GPU Ray
gave the worker, if any.

    aux.services.encoder: {handler: driver.aux.services.encoder:EncoderHandler,
                           kwargs: {dim: 64, seed: 0}}
"""

from __future__ import annotations

import numpy as np


class EncoderHandler:
    """Handler: one ConditionEncoder per channel count seen (built on first use)."""

    def __init__(self, dim: int = 64, seed: int = 0, threads: int = 1, device: str = "auto"):
        if dim < 1:
            raise ValueError(f"encoder dim must be at least 1, not {dim}")
        self.dim, self.seed, self.threads = int(dim), int(seed), int(threads)
        self.device = resolve_device(device)
        self.encoders: dict[int, object] = {}

    def setup(self) -> None:
        import torch

        torch.set_num_threads(max(1, self.threads))

    def encoder(self, channels: int):
        from driver.workloads.dit import ConditionEncoder

        if channels not in self.encoders:
            encoder = ConditionEncoder(channels, self.dim, self.seed)
            self.encoders[channels] = encoder.to(self.device)
        return self.encoders[channels]

    def ready(self) -> dict:
        probe = self.encode(np.zeros((1, 3, 8, 8), np.float32))
        if probe.shape != (1, self.dim) or not np.isfinite(probe).all():
            raise RuntimeError(f"encoder probe gave {probe.shape}, expected (1, {self.dim})")
        return {"dim": self.dim, "seed": self.seed}

    def encode(self, images: np.ndarray) -> np.ndarray:
        import torch

        if images.ndim != 4:
            raise ValueError(f"images must be (batch, channels, H, W), not {images.shape}")
        batch = torch.from_numpy(np.array(images, dtype=np.float32))  # own, writable copy
        return self.encoder(batch.shape[1])(batch.to(self.device)).cpu().numpy()

    def handle(self, method: str, payload: dict, ctx) -> dict:
        if method != "encode":
            raise ValueError(f"unknown method {method!r} (encoder serves 'encode')")
        return {"embeddings": self.encode(np.asarray(payload["images"]))}


def resolve_device(device: str) -> str:
    """`auto`: the GPU Ray assigned this worker (CUDA_VISIBLE_DEVICES), else the CPU."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
