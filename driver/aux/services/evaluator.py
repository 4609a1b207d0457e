"""An evaluator service: scores the weights rank 0 broadcasts on held-out data.

The worker builds the run's model (`model` and `data` are the run's config sections,
interpolated into the service's kwargs) and a held-out set: `batches` batches of examples
the run never trains on (the dataset generator with another seed) with fixed noise levels
and noise for the DiT, so scores of different versions compare. Weights arrive through the
refresh group (driver.aux.refresh) into `load_weights`; `evaluate` scores the newest
complete version with `torch.func.functional_call` (the served module is never written).

Method `evaluate`: payload `{"version": v}` (wait up to `wait_s` for version >= v) ->
`{"version": int, "loss": float}`. `device: auto` scores on the worker's GPU, if any.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

from driver.aux.refresh import Versioned
from driver.aux.services.encoder import EncoderHandler, resolve_device

HELD_OUT_SEED = 7919  # added to data.seed: examples the run does not train on


class EvaluatorHandler:
    """Handler: held-out loss of the newest refreshed weights."""

    def __init__(self, model: dict, data: dict, encoder: dict | None = None, batches: int = 4,
                 batch_size: int = 32, wait_s: float = 10.0, threads: int = 1,
                 device: str = "auto"):  # fmt: skip
        self.model_cfg, self.data_cfg = SimpleNamespace(**model), SimpleNamespace(**data)
        self.encoder_cfg, self.batches, self.batch_size = encoder, batches, batch_size
        self.wait_s, self.threads = wait_s, threads
        self.device = resolve_device(device)
        self.weights = Versioned()
        self.scored = 0

    def setup(self) -> None:
        import torch

        from driver.workloads import build

        torch.set_num_threads(max(1, self.threads))
        held_out = SimpleNamespace(**{**vars(self.data_cfg),
                                      "seed": self.data_cfg.seed + HELD_OUT_SEED})  # fmt: skip
        dim = int(self.encoder_cfg["dim"]) if self.encoder_cfg else 0
        self.work = build(self.model_cfg, held_out, cond_dim=dim)
        self.work.model.to(self.device).eval()
        self.held_out = [self._to_device(self._batch(i)) for i in range(self.batches)]

    def _batch(self, index: int) -> tuple:
        """Held-out batch `index` with its fixed noise (and embeddings)."""
        import torch

        from driver.data.feed import to_torch
        from driver.data.stages import default_collate

        gen = torch.Generator().manual_seed(index)
        size = min(self.batch_size, len(self.work.dataset))
        start = (index * size) % max(1, len(self.work.dataset) - size + 1)
        samples = [self.work.dataset[start + i] for i in range(size)]
        batch = to_torch(default_collate(samples))
        if self.model_cfg.kind != "dit":
            return (batch,)
        t = torch.rand(size, generator=gen)
        noise = torch.randn(batch.shape, generator=gen)
        emb = None
        if self.encoder_cfg:
            encoder = EncoderHandler(self.encoder_cfg["dim"], self.encoder_cfg.get("seed", 0))
            emb = torch.from_numpy(encoder.encode(batch.numpy()))
        return (batch, t, noise, emb)

    def _to_device(self, batch: tuple) -> tuple:
        from driver.trainer.core import to_device

        return tuple(None if part is None else to_device(part, self.device) for part in batch)

    def load_weights(self, version: int, state: dict) -> None:
        """A complete received state (moved to this worker's device first) becomes the
        served version."""
        self.weights.set(version, {k: v.to(self.device) for k, v in state.items()})

    def ready(self) -> dict:
        return {"held_out_batches": len(self.held_out), "kind": self.model_cfg.kind}

    def score(self, state: dict) -> float:
        import torch
        from torch.func import functional_call

        from driver.workloads import dit

        model = self.work.model

        def call(*args):
            return functional_call(model, state, args, strict=False)

        total = 0.0
        with torch.no_grad():
            for batch in self.held_out:
                if self.model_cfg.kind == "dit":
                    images, t, noise, emb = batch
                    emb = emb if "cond.weight" in state else None  # an unconditioned run
                    total += float(dit.denoise_loss(call, images, t, noise, emb))
                else:
                    total += float(self.work.loss(call, batch[0]))
        return total / len(self.held_out)

    def handle(self, method: str, payload: dict, ctx) -> dict:
        if method != "evaluate":
            raise ValueError(f"unknown method {method!r} (evaluator serves 'evaluate')")
        version, state = self.weights.wait_for(int(payload.get("version", 0)), self.wait_s)
        if state is None:
            return {"version": 0, "loss": math.nan}
        self.scored += 1
        return {"version": version, "loss": self.score(state)}
