"""Reference workloads that train on CPU in minutes: `lm` (decoder-only language model on a
generated corpus) and `dit` (DiT-style denoiser on generated shapes).

`build(model_cfg, data_cfg)` returns a `Workload`: the model, the map-style dataset, the loss
function and how many units (tokens or samples) one example counts for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class Workload:
    model: Any
    """The torch module (on CPU, not wrapped)."""
    dataset: Any
    """Map-style dataset: `__len__` and `__getitem__` returning numpy arrays."""
    loss: Callable
    """`loss(model, batch) -> scalar tensor`."""
    units_per_example: int
    """Tokens (lm) or samples (dit) one example counts for in throughput figures."""
    unit: str
    """`tokens` or `samples`."""


def build(model_cfg, data_cfg, cond_dim: int = 0) -> Workload:
    """The workload named by `model_cfg.kind`, with its dataset from `data_cfg`; `cond_dim`
    > 0 conditions the DiT on embeddings of that size (batches are (images, embeddings))."""
    if model_cfg.kind == "lm":
        from driver.workloads import lm
        from driver.workloads.text import TextDataset

        data = TextDataset(data_cfg.size, data_cfg.seq_len, data_cfg.seed)
        model = lm.TinyLM(
            data.vocab_size, data_cfg.seq_len, model_cfg.d_model, model_cfg.n_layers,
            model_cfg.n_heads, model_cfg.mlp_ratio,
        )  # fmt: skip
        return Workload(model, data, lm.loss, data_cfg.seq_len, "tokens")
    if model_cfg.kind == "dit":
        from driver.workloads import dit
        from driver.workloads.shapes import ShapesDataset

        data = ShapesDataset(data_cfg.size, data_cfg.image_size, data_cfg.channels, data_cfg.seed)
        model = dit.TinyDiT(
            data_cfg.image_size, data_cfg.channels, model_cfg.patch_size, model_cfg.d_model,
            model_cfg.n_layers, model_cfg.n_heads, cond_dim,
        )  # fmt: skip
        return Workload(model, data, dit.loss, 1, "samples")
    raise ValueError(f"unknown model kind {model_cfg.kind!r}")
