"""Procedurally generated images for the denoiser: one shape per image on a plain background.

Item i of `ShapesDataset` is a float32 array (channels, size, size) in [-1, 1], made from the
seed and the index alone (no storage, the same on every worker): a disc, a square or stripes
in a random colour, position and size. Look at one with `python -m driver.workloads.shapes`.
"""

from __future__ import annotations

import numpy as np


def make_image(rng: np.random.Generator, size: int, channels: int) -> np.ndarray:
    """One image: background colour plus a disc, a square or stripes."""
    background = rng.uniform(-1.0, -0.2, size=(channels, 1, 1))
    colour = rng.uniform(0.2, 1.0, size=(channels, 1, 1))
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    cy, cx = rng.uniform(size * 0.25, size * 0.75, size=2)
    radius = rng.uniform(size * 0.15, size * 0.35)
    kind = rng.integers(3)
    if kind == 0:
        mask = (yy - cy) ** 2 + (xx - cx) ** 2 <= radius**2
    elif kind == 1:
        mask = (np.abs(yy - cy) <= radius) & (np.abs(xx - cx) <= radius)
    else:
        period = int(rng.integers(3, 6))
        mask = ((xx + yy).astype(np.int64) // period) % 2 == 0
    image = np.where(mask[None], colour, background)
    return image.astype(np.float32)


class ShapesDataset:
    """Map-style dataset of generated images, deterministic per (seed, index)."""

    def __init__(self, size: int, image_size: int, channels: int, seed: int):
        self.size, self.image_size, self.channels, self.seed = size, image_size, channels, seed

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> np.ndarray:
        if not 0 <= index < self.size:
            raise IndexError(index)
        rng = np.random.default_rng([self.seed, index])
        return make_image(rng, self.image_size, self.channels)


if __name__ == "__main__":
    image = ShapesDataset(1, 16, 1, seed=0)[0][0]
    for row in image:
        print("".join("#" if value > 0 else "." for value in row))
