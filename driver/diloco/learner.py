"""The learner side of DiLoCo: a component the training loop calls after every step.

    learner = make(cfg, model)              # cfg: LearnerConfig (or LearnerConfig.from_env())
    learner.start(model)                    # join: take the shared weights (or offer ours)
    for step in ...:
        ...; optimizer.step()
        learner.after_step(step, model)     # every H local steps: push, then merge
    learner.close()

Every `sync_every` (H) local steps it sends its pseudo-gradient (shared weights it started
from minus its weights now, in `compression`) to the synchronizer. `barrier` mode waits for
the merged update (up to `barrier_timeout_s`; then it trains on, merges the update if it
comes later, and pushes again at the next sync point); `decoupled` mode trains on and
merges when the update arrives, by `merge`:
`delta` (default) keeps the steps taken while the round was in flight, `replace` drops
them (see outer.merge). The inner optimizer's state is kept across merges. A late or
returning learner gets the shared weights whole and continues from them.

With `fragments` > 1 (streaming) `make` returns `streaming.Streaming`: one Learner per
fragment of the parameters, each on its own staggered schedule (docs/diloco.md).

In a multi-process learner (torch.distributed initialised, several ranks) rank 0 talks to
the synchronizer and broadcasts each merge to the other ranks; every rank calls after_step.
"""

from __future__ import annotations

import logging
import time

import torch

from driver.config.diloco import ENV_PREFIX, LearnerConfig
from driver.diloco import outer
from driver.diloco.link import Client
from driver.messaging import wire

log = logging.getLogger("driver.diloco.learner")
__all__ = ["ENV_PREFIX", "Learner", "LearnerConfig", "make"]


class Learner:
    """One learner's sync state: the shared weights it started from, its push in flight."""

    def __init__(self, cfg: LearnerConfig, fragment: int = 0, names: list[str] | None = None):
        """`fragment` and `names`: this learner syncs only these parameters (streaming)."""
        self.cfg, self.fragment = cfg, fragment
        self.names = set(names) if names is not None else None
        self.offset = fragment * cfg.sync_every // cfg.fragments
        self.rank = torch.distributed.get_rank() if _distributed() else 0
        self.client = Client(cfg.address, cfg.curve()) if self.rank == 0 else None
        self.base: outer.Params = {}
        self.round = -1
        self.local_steps = 0
        self.pending: tuple[int, float] | None = None  # (request id, sent at)
        self.snapshot: outer.Params = {}
        self.residual: outer.Params = {}  # what compression left out of the last push
        self.merges: list[dict] = []  # one record per merge (round, kind, step)
        self.pushes: list[dict] = []  # one record per push (step, bytes)
        self.wait_s = 0.0  # time spent blocked on the synchronizer
        self.dirty = False  # merged since the last broadcast to the other ranks
        self.resumed = False  # base, round, steps and residual came from a checkpoint

    def start(self, model: torch.nn.Module) -> None:
        """Join: continue from the shared weights, or offer ours when there are none yet.
        A learner restored from its checkpoint (resume.LearnerState) joins with the shared
        weights it held: when the synchronizer is still at that round it keeps its weights
        and schedule and pushes at its next sync point as if it never stopped; else it gets
        the new shared weights and (merge `delta`) keeps its progress on top of them."""
        if not self.resumed:
            self.base = outer.clone(self._mine(model))
            self.snapshot = self.base
        if self.rank == 0:
            join = {
                "learner": self.cfg.learner,
                "digest": outer.digest(self.base),
                "fragment": self.fragment,
            }
            self.pending = (self.client.request("join", join), time.time())
            self._wait(model, self.cfg.join_timeout_s, step=-1)
        self._share(model)

    def after_step(self, step: int, model: torch.nn.Module) -> None:
        """Call after every optimizer step (every rank)."""
        self.local_steps += 1
        sync = (self.local_steps + self.offset) % self.cfg.sync_every == 0
        if self.rank == 0:
            if self.pending:  # decoupled, or a barrier wait that timed out: merge on arrival
                self._poll(model, step, 0.0)
            if sync:
                self._sync_point(model, step)
        if sync or self.cfg.mode == "decoupled":
            self._share(model)

    def _sync_point(self, model: torch.nn.Module, step: int) -> None:
        fresh = self.pending and time.time() - self.pending[1] < self.cfg.retry_s
        if self.cfg.mode == "decoupled" and fresh:
            return  # the previous round is still in flight
        self.snapshot = outer.clone(self._mine(model))
        grad, self.residual = outer.with_feedback(
            outer.pseudo_gradient(self.base, self.snapshot), self.residual, self.cfg.compression
        )
        before = self.client.sent_bytes
        request = self.client.request(
            "push",
            {
                "learner": self.cfg.learner,
                "round": self.round,
                "step": step,
                "grad": grad,
                "fragment": self.fragment,
            },
        )
        self.pending = (request, time.time())
        self.pushes.append({"step": step, "bytes": self.client.sent_bytes - before})
        if self.cfg.mode == "barrier":
            self._wait(model, self.cfg.barrier_timeout_s, step)

    def _offer(self, model: torch.nn.Module) -> None:
        self.snapshot = outer.clone(self._mine(model))
        request = self.client.request(
            "init",
            {
                "learner": self.cfg.learner,
                "weights": {"t": self.snapshot},
                "fragment": self.fragment,
            },
        )
        self.pending = (request, time.time())

    def _wait(self, model: torch.nn.Module, timeout_s: float, step: int) -> None:
        start = time.time()
        while self.pending and time.time() - start < timeout_s:
            self._poll(model, step, min(0.5, timeout_s))
        self.wait_s += time.time() - start
        if self.pending:
            log.warning(
                "%s: no answer from the synchronizer in %.0f s; training on",
                self.cfg.learner,
                timeout_s,
            )

    def _poll(self, model: torch.nn.Module, step: int, timeout_s: float) -> None:
        msg = self.client.recv(timeout_s)
        if msg is None or not self.pending or msg.id != self.pending[0]:
            return  # nothing, or the answer to a request given up on
        self.pending = None
        if msg.kind == "err":
            log.warning("%s: synchronizer refused: %s %s", self.cfg.learner, msg.code, msg.error)
            return
        try:
            reply = wire.decode(msg.body, torch=True)
            self._apply(model, reply, step)
        except (ValueError, KeyError, TypeError) as err:
            log.warning("%s: bad reply from the synchronizer: %s", self.cfg.learner, err)

    def _apply(self, model: torch.nn.Module, reply: dict, step: int) -> None:
        kind, weights = reply["kind"], reply.get("weights")
        if kind == "empty":  # no shared weights yet: offer ours (the answer comes as full)
            return self._offer(model)
        if kind == "same":  # we hold the shared weights already: our weights stay as they are
            self.round = int(reply["round"])
            self.merges.append({"round": self.round, "kind": kind, "step": step,
                                "fragment": self.fragment})  # fmt: skip
            return
        if kind == "delta":
            new_base = outer.apply_delta(self.base, outer.unpack(weights, self.base, "delta"))
        else:
            new_base = outer.unpack(weights, self.base, "shared weights")
        now = self._mine(model)  # on the model's device; the merge is done on CPU copies
        local = outer.merge(self.cfg.merge, outer.clone(now), self.snapshot, new_base)
        with torch.no_grad():
            for name, tensor in now.items():
                tensor.copy_(local[name])
        self.base, self.round = new_base, int(reply["round"])
        self.merges.append(
            {"round": self.round, "kind": kind, "step": step, "fragment": self.fragment}
        )
        self.dirty = True

    def _share(self, model: torch.nn.Module) -> None:
        """Multi-rank learners: rank 0's merges reach every rank (a no-op on one process)."""
        if not _distributed() or torch.distributed.get_world_size() == 1:
            self.dirty = False
            return
        flag = torch.tensor([int(self.dirty)])
        torch.distributed.broadcast(flag, 0)
        if flag.item():
            for tensor in self._mine(model).values():
                torch.distributed.broadcast(tensor.data, 0)
        self.dirty = False

    def finish(self, model: torch.nn.Module) -> None:
        """At the end of training: wait for the update of a round still in flight."""
        if self.rank == 0 and self.pending:
            self._wait(model, self.cfg.barrier_timeout_s, step=self.local_steps - 1)
        self._share(model)

    def close(self) -> None:
        if self.client:
            self.client.close()

    def _mine(self, model: torch.nn.Module) -> outer.Params:
        """The parameters this learner syncs (all, or its fragment's)."""
        return {k: v for k, v in model.named_parameters() if self.names is None or k in self.names}

    @property
    def sent_bytes(self) -> int:
        return self.client.sent_bytes if self.client else 0


def make(cfg: LearnerConfig, model: torch.nn.Module):
    """The learner for a config: one Learner, or `streaming.Streaming` when `cfg.fragments`
    > 1."""
    if cfg.fragments > 1:
        from driver.diloco.streaming import Streaming

        return Streaming(cfg, model)
    return Learner(cfg)


def _distributed() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()
