"""The key of one run: every signed artifact of a run (checkpoint commit markers, crash
bundles) is signed with it, so only what the run's own team wrote authenticates.

`run_key = HMAC-SHA256(team secret, context | team | run)`: the team's secret
(`labels.CHECKPOINT_KEY_ENV`, from the team's Secret in a cluster) never leaves the run; a
key made for one run authenticates nothing of another. `driver.checkpoint.auth` signs
commit markers with it, `driver.output.crash_upload` crash bundles (`observability.bundle`),
and `runner diagnose` checks them.

    key = run_key(secret, "research", "tiny-lm")
"""

from __future__ import annotations

import hmac

CONTEXT = b"reve-checkpoint-v1"


def run_key(secret: bytes, team: str, run: str) -> bytes:
    """The key of one run's signatures (the run's identity is part of the key)."""
    return hmac.new(secret, b"\0".join((CONTEXT, team.encode(), run.encode())), "sha256").digest()
