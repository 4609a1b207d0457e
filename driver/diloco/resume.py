"""A learner's sync state in its training checkpoint, so a restarted learner resumes exactly.

    state = TrainState(model, optimizer, ..., extra={"diloco": LearnerState(learner, model)})
    checkpointer.load(state)      # before learner.start(model): the learner is resumed
    learner.start(model)          # joins with the shared weights it held (docs/diloco.md)

Per part of the learner (one, or one per streaming fragment) it saves the shared weights it
started its round from (`base`), what compression left out of its last push (`residual`,
error feedback), the weights of a push still in flight (`snapshot`) as tensors, and its
bookkeeping (learner, fragment, round, local steps, whether a push was in flight) as JSON
bytes (`driver.checkpoint.plain`): the checkpoint layer stores tensors and loads the other
entries weights-only, so nothing in it can run code on load. Every rank holds the same
state (driver.diloco.learner) and loads it.
"""

from __future__ import annotations

import torch

from driver.checkpoint.plain import decode_state, encode_state
from driver.diloco import outer, weights


def parts(learner) -> list:
    """The Learner objects of a learner (Streaming holds one per fragment)."""
    return list(getattr(learner, "parts", [learner]))


class LearnerState:
    """The checkpoint's `Stateful` for a learner (Learner or Streaming) and its model."""

    def __init__(self, learner, model: torch.nn.Module):
        self.learner, self.model = learner, model

    def state_dict(self) -> dict:
        """Live tensors of the right shapes even before the learner started (load targets)."""
        out = {}
        for part in parts(self.learner):
            shapes = weights.zeros(part._mine(self.model))
            base = part.base or shapes
            in_flight = part.in_flight
            out[f"fragment{part.fragment}"] = {
                "meta": encode_state(
                    {
                        "learner": part.cfg.learner,
                        "fragment": part.fragment,
                        "round": part.round,
                        "local_steps": part.local_steps,
                        "in_flight": in_flight,
                        "started": bool(part.base),
                    }
                ),
                "base": base,
                "residual": part.residual or outer.zeros_like(shapes),
                "snapshot": part.snapshot if in_flight and part.snapshot else base,
            }
        return out

    def load_state_dict(self, state: dict) -> None:
        for part in parts(self.learner):
            saved = state[f"fragment{part.fragment}"]
            meta = decode_state(saved["meta"])
            if (meta["learner"], meta["fragment"]) != (part.cfg.learner, part.fragment):
                raise ValueError(
                    f"checkpoint holds DiLoCo state of learner {meta['learner']!r} fragment "
                    f"{meta['fragment']}, not {part.cfg.learner!r} fragment {part.fragment}"
                )
            if not meta["started"]:
                continue  # saved before the learner joined: start as a new learner
            restore(part, meta, saved)


def restore(part, meta: dict, saved: dict) -> None:
    """Put one part's saved state back (before `start`)."""
    part.base = outer.clone(saved["base"])
    part.residual = outer.clone(saved["residual"])
    part.snapshot = outer.clone(saved["snapshot"]) if meta["in_flight"] else part.base
    part.round, part.local_steps = int(meta["round"]), int(meta["local_steps"])
    part.resumed = True  # it joins first: the answer settles a push that was in flight
