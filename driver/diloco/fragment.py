"""One fragment's outer state and rounds in the DiLoCo synchronizer (driver.diloco.synchronizer).

A `Fragment` holds the shared weights, outer momentum and round of one fragment of the
model (all of it unless learners stream), saved in its own folder (`state.py`), and
answers the synchronizer's `join`, `init` and `push` requests for it (replies through the
`link.Server`: `kind` `same`, `full`, `empty` or, after a merge, `delta`). `merge()` takes
one outer step over the pending pseudo-gradients, saves the state, appends the round's
record and replies to the contributors. The wire format is the synchronizer's (its
docstring); log lines go to the synchronizer's log.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from driver.diloco import outer, state
from driver.diloco.link import Server
from driver.messaging import wire

if TYPE_CHECKING:
    from driver.diloco.synchronizer import OuterConfig

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
        """One outer step over the pending pseudo-gradients; save; reply to contributors."""
        st, cfg = self.state, self.cfg
        names = sorted(self.pending)
        grad = outer.mean([self.pending[n][2] for n in names])
        st.shared, st.momentum = outer.outer_step(
            st.shared, st.momentum, grad, cfg.lr, cfg.momentum, cfg.nesterov
        )
        delta, st.view = outer.advance_view(st.view, st.shared, cfg.compression)
        missing = sorted(self.expected - set(names))
        st.round += 1
        state.save(self.state_dir, st)
        record = {
            "round": st.round,
            "fragment": self.index,
            "contributors": names,
            "missing": missing,
            "late": sorted(self.late),
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
        self.expected, self.pending, self.late = set(names), {}, set()
