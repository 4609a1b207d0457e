"""A DiLoCo learner's settings: `LearnerConfig`, from code or from `REVE_DILOCO_*`.

cfg = LearnerConfig.from_env()     # None unless REVE_DILOCO_ADDRESS is set
cfg = LearnerConfig("tcp://sync:5555", "a", keys="KEYS", sync_every=50, mode="decoupled")
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

from driver.diloco import keys
from driver.diloco.keys import ENV as ENV_PREFIX


@dataclass
class LearnerConfig:
    """How a learner syncs; `from_env` reads `REVE_DILOCO_<FIELD>` (upper case)."""

    address: str
    """The synchronizer's endpoint (tcp://host:port)."""
    learner: str
    """This learner's name (its label; its key is `<keys>/<learner>.key_secret`)."""
    keys: str = ""
    """Keys folder (driver.diloco.keys layout), or empty: the three keys below."""
    sync_every: int = 50
    """H: local steps between syncs."""
    mode: str = "barrier"
    """`barrier` (wait for the merged weights) or `decoupled` (train on, merge on arrival)."""
    merge: str = "delta"
    """Decoupled merge rule: `delta` (keep steps taken in flight) or `replace`."""
    compression: str = "bf16"
    """Precision of the pseudo-gradients on the wire: `bf16`, `fp16` or `fp32`."""
    barrier_timeout_s: float = 120.0
    """Barrier mode: longest wait for the merged weights before training on."""
    join_timeout_s: float = 60.0
    """Longest wait for the shared weights at start (then train on from our own)."""
    retry_s: float = 120.0
    """Decoupled mode: a push unanswered this long is sent again at the next sync point."""
    public_key: str = ""
    """This learner's Curve public key (Z85), when `keys` is empty (a Secret in a cluster)."""
    secret_key: str = ""
    """This learner's Curve secret key (Z85), when `keys` is empty."""
    server_key: str = ""
    """The synchronizer's Curve public key (Z85), when `keys` is empty."""
    index: int = 0
    """This learner's position among the experiment's learners: its ranks read data shard
    `index` of `learners` (learners never train on the same samples)."""
    learners: int = 1
    """How many learners the experiment has."""
    fragments: int = 1
    """Streaming: the model in this many fragments, each synced every H steps on its own
    schedule (fragment f after H*f/fragments steps), so a sync point moves 1/fragments of
    the weights."""

    def curve(self) -> tuple[bytes, bytes, bytes]:
        """(public, secret, server public) keys: from the folder, else from the fields."""
        if self.keys:
            return keys.client_keys(self.keys, self.learner)
        triple = (self.public_key, self.secret_key, self.server_key)
        if any(len(k) != 40 for k in triple):
            raise ValueError(
                f"{ENV_PREFIX}KEYS or {ENV_PREFIX}PUBLIC_KEY, _SECRET_KEY and "
                "_SERVER_KEY (40 Z85 characters each) must be set"
            )
        return tuple(k.encode() for k in triple)

    def __post_init__(self) -> None:
        from driver.diloco import outer  # torch: only once a learner's settings are read

        checks = [
            (self.sync_every >= 1, "sync_every", "at least 1"),
            (self.mode in outer.MODES, "mode", f"one of {outer.MODES}"),
            (self.merge in outer.MERGE_RULES, "merge", f"one of {outer.MERGE_RULES}"),
            (
                self.compression in outer.COMPRESSIONS,
                "compression",
                str(sorted(outer.COMPRESSIONS)),
            ),
            (self.address.startswith("tcp://"), "address", "tcp://host:port"),
            (1 <= self.fragments <= min(64, self.sync_every), "fragments", "1 to min(64, H)"),
            (self.learners >= 1, "learners", "at least 1"),
            (0 <= self.index < self.learners, "index", f"0 to {self.learners - 1}"),
        ]
        for ok, name, want in checks:
            if not ok:
                raise ValueError(
                    f"{ENV_PREFIX}{name.upper()}: {getattr(self, name)!r}: expected {want}"
                )

    @classmethod
    def from_env(cls, environ: dict | None = None) -> LearnerConfig | None:
        """The config from `REVE_DILOCO_*`, or None when `REVE_DILOCO_ADDRESS` is unset."""
        env = os.environ if environ is None else environ
        if not env.get(ENV_PREFIX + "ADDRESS"):
            return None
        values = {}
        for f in fields(cls):
            raw = env.get(ENV_PREFIX + f.name.upper())
            if raw is not None:
                kind = {"int": int, "float": float}.get(str(f.type), str)
                try:
                    values[f.name] = kind(raw)
                except ValueError:
                    raise ValueError(
                        f"{ENV_PREFIX}{f.name.upper()}: {raw!r} is not {f.type}"
                    ) from None
        return cls(**values)


def data_shard(rank: int, world: int, environ: dict | None = None) -> tuple[int, int]:
    """The (rank, world) a rank's batch source reads with: a DiLoCo learner's ranks read
    their learner's slice of the global order (learner `index` of `learners`), so learners
    never see the same samples; outside an experiment, the rank's own (rank, world)."""
    cfg = LearnerConfig.from_env(environ)
    if cfg is None:
        return rank, world
    return cfg.index * world + rank, cfg.learners * world
