"""The learner side of DiLoCo: a component the training loop calls after every step.

    learner = make(cfg, model)              # cfg: LearnerConfig (the config's `diloco`)
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

In a multi-process learner (torch.distributed initialised, several ranks: DDP replicas or
FSDP shards) rank 0 talks to the synchronizer and every rank holds the same sync state:
every rank reads the full weights at a sync point (`weights.read`: a gather per parameter
when FSDP shards them) and computes the same pseudo-gradient; rank 0 alone sends it and
receives the reply; at the next point every rank passes (`_share`) it broadcasts the new
shared weights and every rank merges them into its own parameters, or its own shards
(`weights.merge_into`). Every rank calls after_step.

A learner never sends or applies anything non-finite: a pseudo-gradient with a NaN or an
infinity (its training diverged) is not pushed; the learner asks for the shared weights
instead and replaces its own with them (`refused_pushes`). An update from the
synchronizer whose weights are not finite is not applied (`refused_updates`); the learner
keeps its weights and its next push, against the round it holds, brings the shared
weights whole.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import torch

from driver.config.diloco import LearnerConfig
from driver.diloco import outer, weights
from driver.diloco.link import Client
from driver.messaging import wire

log = logging.getLogger("driver.diloco.learner")
__all__ = ["Learner", "LearnerConfig", "Update", "make"]
KINDS = ("same", "full", "delta")
"""The replies that change a learner's state, as `_share` numbers them (1, 2, 3)."""


@dataclass
class Update:
    """A reply of the synchronizer, received by the rank that talks to it and not yet
    applied on every rank: its kind (`KINDS`), round and new shared weights (None for
    `same`); `offered`: it answers our `init` (the weights we offered are the snapshot)."""

    kind: str
    round: int
    base: outer.Params | None = None
    offered: bool = False


class Learner:
    """One learner's sync state: the shared weights it started from, its push in flight."""

    def __init__(
        self,
        cfg: LearnerConfig,
        fragment: int = 0,
        names: list[str] | None = None,
        talks: bool | None = None,
    ):
        """`fragment` and `names`: this learner syncs only these parameters (streaming).
        `talks`: whether this process talks to the synchronizer (default: rank 0)."""
        self.cfg, self.fragment = cfg, fragment
        self.names = set(names) if names is not None else None
        self.offset = fragment * cfg.sync_every // cfg.fragments
        self.rank = torch.distributed.get_rank() if _distributed() else 0
        talks = self.rank == 0 if talks is None else talks
        self.client = Client(cfg.address, cfg.curve()) if talks else None
        self.base: outer.Params = {}
        self.round = -1
        self.local_steps = 0
        self.pending: tuple[int, float] | None = None  # (request id, sent at)
        self.snapshot: outer.Params = {}
        self.latest: outer.Params = {}  # the weights read last (offered when none are shared)
        self.residual: outer.Params = {}  # what compression left out of the last push
        self.outbox: dict | None = None  # the packed pseudo-gradient of the push in flight
        self.in_flight = False  # a push whose merge has not been applied yet
        self.update: Update | None = None  # received, not applied on every rank yet
        self.offering = False  # our weights were offered (`init`), the answer is pending
        self.merges: list[dict] = []  # one record per merge (round, kind, step)
        self.pushes: list[dict] = []  # one record per push (step, bytes)
        self.wait_s = 0.0  # time spent blocked on the synchronizer
        self.resumed = False  # base, round, steps and residual came from a checkpoint
        self.refused_pushes = 0  # sync points whose pseudo-gradient was not finite
        self.refused_updates = 0  # updates from the synchronizer that were not finite
        self.reset = False  # the next shared weights replace ours (ours were not finite)

    def start(self, model: torch.nn.Module) -> None:
        """Join: continue from the shared weights, or offer ours when there are none yet.
        A learner restored from its checkpoint (resume.LearnerState) joins with the shared
        weights it held: when the synchronizer is still at that round it keeps its weights
        and schedule and pushes at its next sync point as if it never stopped; else it gets
        the new shared weights and (merge `delta`) keeps its progress on top of them.
        Every rank calls it."""
        self.latest = self._read(model)
        if not self.resumed:
            self.base = self.latest
            self.snapshot = self.base
        if self.client is not None:
            join = {
                "learner": self.cfg.learner,
                "digest": outer.digest(self.base),
                "fragment": self.fragment,
            }
            self.pending = (self.client.request("join", join), time.time())
            self._wait(model, self.cfg.join_timeout_s, step=-1)
        self._share(model, -1)

    def after_step(self, step: int, model: torch.nn.Module) -> None:
        """Call after every optimizer step (every rank)."""
        sync = self._tick()
        if self.client is not None and self.pending:  # decoupled, or a barrier wait that
            self._poll(model, step, 0.0)  # timed out: a reply is applied at the next share
        push = False
        if sync or self.cfg.mode == "decoupled" or not several_ranks():
            push = self._share(model, step, push=sync and self._due())
        if push:
            self._sync_point(model, step)
            self._share(model, step)

    def _tick(self) -> bool:
        """Count a local step; whether it is this learner's (fragment's) sync point."""
        self.local_steps += 1
        return (self.local_steps + self.offset) % self.cfg.sync_every == 0

    def _due(self) -> bool:
        """Whether this sync point pushes (decided by the rank that talks): not while the
        previous round is still in flight in decoupled mode (unless waited `retry_s`)."""
        fresh = self.pending and time.time() - self.pending[1] < self.cfg.retry_s
        return not (self.cfg.mode == "decoupled" and fresh)

    def _sync_point(self, model: torch.nn.Module, step: int) -> None:
        """Every rank: the snapshot and the pseudo-gradient; rank 0 sends it (or, when it is
        not finite, asks for the shared weights instead)."""
        grad = self._next_push(model, step)
        if self.client is None:
            return
        if grad is None:
            return self._diverged(model, step)
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

    def _next_push(self, model: torch.nn.Module, step: int) -> dict | None:
        """Every rank: the snapshot, and the packed pseudo-gradient against `base` with the
        error feedback of the last push (kept as `outbox` until the round merges); None when
        it is not finite (then the next shared weights replace ours: `reset`)."""
        self.snapshot = self.latest = self._read(model)
        grad = outer.pseudo_gradient(self.base, self.snapshot)
        try:
            outer.check_update(grad, f"{self.cfg.learner}'s pseudo-gradient at step {step}")
        except outer.Refused as err:
            self.refused_pushes += 1
            log.error("%s: not pushed (%s); taking the shared weights instead", self.cfg.learner,
                      err)  # fmt: skip
            self.reset, self.residual = True, {}
            return None
        grad, self.residual = outer.with_feedback(grad, self.residual, self.cfg.compression)
        self.outbox, self.in_flight = grad, True
        return grad

    def _diverged(self, model: torch.nn.Module, step: int) -> None:
        """Our weights are not finite: push nothing, fetch the shared weights to replace
        ours (a join without a digest is answered with them whole)."""
        join = {"learner": self.cfg.learner, "digest": "", "fragment": self.fragment}
        self.pending = (self.client.request("join", join), time.time())
        if self.cfg.mode == "barrier":
            self._wait(model, self.cfg.barrier_timeout_s, step)

    def _offer(self, model: torch.nn.Module) -> None:
        """No shared weights yet: offer the weights read last (every rank holds them)."""
        try:
            outer.check_update(self.latest, f"{self.cfg.learner}'s weights")
        except outer.Refused as err:  # never the shared weights' first value
            log.error("%s: weights not offered: %s", self.cfg.learner, err)
            return
        self.offering = True
        request = self.client.request(
            "init",
            {
                "learner": self.cfg.learner,
                "weights": {"t": self.latest},
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
        except outer.Refused as err:
            self.refused_updates += 1
            log.error("%s: update not applied: %s", self.cfg.learner, err)
        except Exception as err:  # noqa: BLE001 (a reply must not end the training step)
            log.warning("%s: bad reply from the synchronizer: %s", self.cfg.learner, err)

    def _apply(self, model: torch.nn.Module, reply: dict, step: int) -> None:
        """A reply: kept as `self.update` until every rank applies it (`_share`)."""
        kind, packed = reply["kind"], reply.get("weights")
        if kind == "empty":  # no shared weights yet: offer ours (the answer comes as full)
            return self._offer(model)
        offered, self.offering = self.offering, False
        if kind == "same":  # we hold the shared weights already: our weights stay as they are
            self.update = Update(kind, int(reply["round"]))
            return
        if kind == "delta":
            new_base = outer.apply_delta(self.base, outer.unpack(packed, self.base, "delta"))
        else:
            new_base = outer.unpack(packed, self.base, "shared weights")
        outer.check_update(new_base, f"round {reply['round']} {kind} from the synchronizer")
        self.update = Update(kind, int(reply["round"]), new_base, offered)

    def _share(self, model: torch.nn.Module, step: int, push: bool = False) -> bool:
        """Every rank: the reply rank 0 received, if any, applied on every rank (the new
        shared weights broadcast, each rank merging them into its own parameters); returns
        rank 0's `push` (whether the sync point pushes)."""
        update = self.update
        if several_ranks():
            mine = self._mine(model)
            device = next(iter(mine.values())).device
            head = (
                [KINDS.index(update.kind) + 1, update.round, int(update.offered)]
                if update
                else [0, 0, 0]
            )
            code = torch.tensor([*head, int(push)], dtype=torch.int64, device=device)
            torch.distributed.broadcast(code, 0)
            kind, round_, offered, push = code.tolist()
            if kind:
                base = update.base if update else None
                if KINDS[kind - 1] != "same":
                    base = weights.broadcast(base, mine, 0)
                update = Update(KINDS[kind - 1], round_, base, bool(offered))
        self.update = None
        if update is not None:
            self._adopt(model, update, step)
        return bool(push)

    def _adopt(self, model: torch.nn.Module, update: Update, step: int) -> None:
        """Every rank: the new shared weights merged into its weights by `merge`."""
        if update.kind != "same":
            if update.offered:  # our offered weights became the shared ones
                self.snapshot = self.latest
            rule = "replace" if self.reset else self.cfg.merge  # ours were not finite: theirs
            weights.merge_into(self._mine(model), rule, self.snapshot, update.base)
            self.base, self.in_flight, self.outbox = update.base, False, None
            self.reset = False
        self.round = update.round
        self.merges.append(
            {"round": self.round, "kind": update.kind, "step": step, "fragment": self.fragment}
        )

    def finish(self, model: torch.nn.Module) -> None:
        """At the end of training: wait for the update of a round still in flight."""
        if self.client is not None and self.pending:
            self._wait(model, self.cfg.barrier_timeout_s, step=self.local_steps - 1)
        self._share(model, self.local_steps - 1)

    def close(self) -> None:
        if self.client:
            self.client.close()

    def _mine(self, model: torch.nn.Module) -> outer.Params:
        """The parameters this learner syncs (all, or its fragment's)."""
        params = weights.named(model)
        return {k: v for k, v in params.items() if self.names is None or k in self.names}

    def _read(self, model: torch.nn.Module) -> outer.Params:
        """Every rank: the full weights this learner syncs, as fp32 CPU copies."""
        return weights.read(self._mine(model))

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


def several_ranks() -> bool:
    """Whether the learner has several ranks (torch.distributed, world > 1)."""
    return _distributed() and torch.distributed.get_world_size() > 1
