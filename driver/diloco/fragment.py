"""One fragment's outer state and rounds in the DiLoCo synchronizer (driver.diloco.synchronizer).

A `Fragment` holds the shared weights, outer momentum and round of one fragment of the
model (all of it unless learners stream), saved in its own folder (`state.py`), and
answers the synchronizer's `join`, `init` and `push` requests for it (replies through the
`link.Server`: `kind` `same`, `full`, `empty` or, after a merge, `delta`). `merge()` takes
one outer step over the pending pseudo-gradients, saves the state, appends the round's
record and replies to the contributors. The wire format is the synchronizer's (its
docstring); log lines go to the synchronizer's log.

Nothing non-finite gets in or out: a push whose pseudo-gradient holds a NaN, an infinity
or a value over `cfg.max_update`, and an `init` with non-finite weights, are refused
(`outer.Refused`, counted by the synchronizer against the learner, and recorded in the
next round's `refused`); and a merge is computed aside and checked before it is saved or
sent: one that comes out non-finite (a bf16/fp16 delta that overflowed) is dropped, its
contributors answered with an error, and the state stays at the last good round.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from driver.diloco import outer, state
from driver.diloco.link import Server
from driver.messaging import wire

if TYPE_CHECKING:
    from driver.diloco.outer import OuterConfig

log = logging.getLogger("driver.diloco.synchronizer")


class Fragment:
    """The outer state and rounds of one fragment of the model (all of it unless learners
    stream: `LearnerConfig.fragments`); its state lives in its own folder."""

    def __init__(self, server: Server, state_dir: str, cfg: OuterConfig, index: int = 0):
        self.server, self.state_dir, self.cfg, self.index = server, state_dir, cfg, index
        self.state = state.load(state_dir)
        self.expected: set[str] = set(cfg.expect)
        self.pending: dict[str, tuple[bytes, int, outer.Params]] = {}
        self.first_push = 0.0
        self.late: set[str] = set()
        self.refused: dict[str, str] = {}  # learner -> why its push was refused this round
        self._digested: tuple[int, str] = (-2, "")
        if self.state:
            log.info("resumed at round %d from %s", self.state.round, state_dir)

    @property
    def round(self) -> int:
        return self.state.round if self.state else -1

    def due(self) -> bool:
        """Whether the pending pseudo-gradients merge now."""
        waited = time.time() - self.first_push
        return bool(self.pending) and outer.round_closes(
            self.expected, self.pending, waited, self.cfg.round_timeout_s, self.cfg.min_learners
        )

    def handle(self, peer: bytes, msg: wire.Message, body: dict) -> None:
        getattr(self, "_" + msg.method)(peer, msg.id, body)

    def _join(self, peer: bytes, request_id: int, body: dict) -> None:
        self.expected.add(body["learner"])
        if self.state and body.get("digest") == self._digest():
            return self.server.reply(peer, request_id, {"kind": "same", "round": self.round})
        self._send_full(peer, request_id)

    def _digest(self) -> str:
        if self._digested[0] != self.round:
            self._digested = (self.round, outer.digest(self.state.view))
        return self._digested[1]

    def _init(self, peer: bytes, request_id: int, body: dict) -> None:
        if self.state is None:
            tensors = body["weights"]["t"]
            weights = outer.unpack(body["weights"], dict(tensors), "init weights")
            outer.check_update(weights, f"init weights from {body['learner']}")
            self.state = state.OuterState(
                0, weights, outer.zeros_like(weights), outer.clone(weights)
            )
            state.save(self.state_dir, self.state)
            log.info("shared weights from %s (%d tensors)", body["learner"], len(weights))
        self.expected.add(body["learner"])
        self._send_full(peer, request_id)

    def _push(self, peer: bytes, request_id: int, body: dict) -> None:
        learner = body["learner"]
        if self.state is None or body.get("round") != self.state.round:
            self.late.add(learner)
            self.expected.add(learner)
            log.info(
                "%s pushed against round %s, at %d: sent the shared weights",
                learner,
                body.get("round"),
                self.round,
            )
            return self._send_full(peer, request_id)
        grad = outer.unpack(body["grad"], self.state.shared, f"push from {learner}")
        try:
            outer.check_update(grad, f"push from {learner}", self.cfg.max_update)
        except outer.Refused as err:
            self.refused[learner] = err.reason
            raise
        if not self.pending:
            self.first_push = time.time()
        self.pending[learner] = (peer, request_id, grad)
        self.expected.add(learner)

    def _send_full(self, peer: bytes, request_id: int) -> None:
        if self.state is None:
            return self.server.reply(peer, request_id, {"kind": "empty", "round": -1})
        self.server.reply(
            peer,
            request_id,
            {"kind": "full", "round": self.state.round, "weights": {"t": self.state.view}},
        )

    def merge(self) -> None:
        """One outer step over the pending pseudo-gradients; save; reply to contributors.
        The new state is computed aside and checked; it replaces the old once saved."""
        old, cfg = self.state, self.cfg
        names = sorted(self.pending)
        grad = outer.mean([self.pending[n][2] for n in names])
        shared, momentum = outer.outer_step(
            old.shared, old.momentum, grad, cfg.lr, cfg.momentum, cfg.nesterov
        )
        delta, view = outer.advance_view(old.view, shared, cfg.compression)
        try:
            for what, params in (("weights", shared), ("momentum", momentum), ("view", view)):
                outer.check_update(params, f"round {old.round + 1} {what}")
        except outer.Refused as err:
            return self._drop_round(names, str(err))
        st = state.OuterState(old.round + 1, shared, momentum, view, old.meta)
        missing = sorted(self.expected - set(names))
        state.save(self.state_dir, st)
        self.state = st
        record = {
            "round": st.round,
            "fragment": self.index,
            "contributors": names,
            "missing": missing,
            "late": sorted(self.late),
            "refused": dict(self.refused),
            "time": time.time(),
        }
        state.append_round(self.state_dir, record)
        log.info(
            "fragment %d round %d merged from %s (missing %s)", self.index, st.round, names, missing
        )
        for name in names:
            peer, request_id, _ = self.pending[name]
            self.server.reply(
                peer,
                request_id,
                {"kind": "delta", "round": st.round, "contributors": names, "weights": delta},
            )
        self.expected, self.pending, self.late, self.refused = set(names), {}, set(), {}

    def _drop_round(self, names: list[str], why: str) -> None:
        """A merge that came out non-finite: not saved, not sent; the contributors are told
        (they push again against the round they hold)."""
        log.error("fragment %d: %s; the round is dropped", self.index, why)
        for name in names:
            peer, request_id, _ = self.pending[name]
            self.server.error(peer, request_id, "refused", f"merge dropped: {why}")
        self.pending = {}
