"""The `diloco` section of the driver config: a DiLoCo learner's settings (`LearnerConfig`).

    diloco:                        # in a run's YAML, or as overrides: diloco.address=...
      address: tcp://sync:5555     # null (the default): the run is not a learner
      learner: us                  # its name (its Curve key's owner)
      sync_every: 50               # H; mode, merge, compression, fragments ...

`runner render` writes each learner of an experiment as overrides of its driver command
(`diloco.address=... diloco.learner=us diloco.index=0 diloco.learners=2 ...`), so the
settings land in the run's `config.yaml`. The Curve keys never do: `keys` names a keys
folder (local runs, `python -m driver.diloco.keys`), else the environment variables
`<keys_env_prefix>PUBLIC_KEY`, `_SECRET_KEY` and `_SERVER_KEY` hold them (a Kubernetes
Secret fills them; the rendered manifests hold `secretKeyRef`s only).

    cfg = LearnerConfig("tcp://sync:5555", "a", keys="KEYS", sync_every=50, mode="decoupled")
    cfg.curve()                          # (public, secret, server public) keys
    data_shard(rank, world, cfg)         # the data shard a learner's rank reads

A bad value is a one-line InputError naming `diloco.<key>` (the file is added at
composition). Importing this module imports neither torch nor zmq.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from catalog.errors import InputError
from driver.diloco import ENV

MODES = ("barrier", "decoupled")
"""`mode`'s choices (driver.diloco.outer keeps its own copy, with the maths)."""
MERGE_RULES = ("delta", "replace")
COMPRESSIONS = ("bf16", "fp16", "fp32", "int8")
KEY_NAMES = ("PUBLIC_KEY", "SECRET_KEY", "SERVER_KEY")
"""A learner's keys in the environment: `<keys_env_prefix><name>`."""
_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass
class LearnerConfig:
    """How a DiLoCo learner syncs with its experiment's synchronizer (docs/diloco.md)."""

    address: str | None = None
    """The synchronizer's endpoint (tcp://host:port); null: this run is not a learner."""
    learner: str = ""
    """This learner's name (its key is `<keys>/<learner>.key_secret`)."""
    keys: str | None = None
    """A keys folder (driver.diloco.keys layout; local runs), or null: the keys are in the
    environment variables named by `keys_env_prefix` (a Secret in a cluster)."""
    sync_every: int = 50
    """H: local steps between syncs."""
    mode: str = "barrier"
    """`barrier` (wait for the merged weights) or `decoupled` (train on, merge on arrival)."""
    merge: str = "delta"
    """Decoupled merge rule: `delta` (keep steps taken in flight) or `replace`."""
    compression: str = "bf16"
    """Precision of the pseudo-gradients on the wire: `bf16`, `fp16`, `int8` or `fp32`."""
    barrier_timeout_s: float = 120.0
    """Barrier mode: longest wait for the merged weights before training on."""
    join_timeout_s: float = 60.0
    """Longest wait for the shared weights at start (then train on from our own)."""
    retry_s: float = 120.0
    """Decoupled mode: a push unanswered this long is sent again at the next sync point
    (0: at every one)."""
    keys_env_prefix: str = ENV
    """Without `keys`: the keys are in `<prefix>PUBLIC_KEY`, `<prefix>SECRET_KEY` and
    `<prefix>SERVER_KEY` (names only: key values never appear in the config)."""
    index: int = 0
    """This learner's position among the experiment's learners: its ranks read data shard
    `index` of `learners` (learners never train on the same samples)."""
    learners: int = 1
    """How many learners the experiment has."""
    fragments: int = 1
    """Streaming: the model in this many fragments, each synced every H steps on its own
    schedule (fragment f after H*f/fragments steps), so a sync point moves 1/fragments of
    the weights."""

    def __post_init__(self) -> None:
        self.check()

    def check(self, source: str | None = None) -> None:
        """Raise InputError (one line naming `diloco.<key>`) for the first bad value."""
        positive = ("barrier_timeout_s", "join_timeout_s")
        checks = [
            (self.sync_every >= 1, "sync_every", "at least 1"),
            (self.mode in MODES, "mode", f"one of {MODES}"),
            (self.merge in MERGE_RULES, "merge", f"one of {MERGE_RULES}"),
            (self.compression in COMPRESSIONS, "compression", f"one of {COMPRESSIONS}"),
            (1 <= self.fragments <= min(64, self.sync_every), "fragments", "1 to min(64, H)"),
            (self.learners >= 1, "learners", "at least 1"),
            (0 <= self.index < self.learners, "index", f"0 to {self.learners - 1}"),
            (bool(_ENV_NAME.match(self.keys_env_prefix)), "keys_env_prefix", "A-Z, 0-9, _"),
            *[(getattr(self, name) > 0, name, "greater than 0") for name in positive],
            (self.retry_s >= 0, "retry_s", "0 or more (0: again at every sync point)"),
        ]
        if self.address is not None:
            checks += [
                (self.address.startswith("tcp://"), "address", "tcp://host:port"),
                (bool(_LABEL.match(self.learner)), "learner", "a DNS label (a-z, 0-9, -)"),
            ]
        for ok, name, want in checks:
            if not ok:
                message = f"{getattr(self, name)!r}: expected {want}"
                raise InputError(source, f"diloco.{name}", message)

    def curve(self, environ: dict | None = None) -> tuple[bytes, bytes, bytes]:
        """(public, secret, server public) keys: from the `keys` folder, else from the
        environment (`keys_env_prefix`). InputError when they are missing or malformed."""
        if self.keys:
            from driver.diloco import keys

            try:
                return keys.client_keys(self.keys, self.learner)
            except (OSError, ValueError) as err:
                raise InputError(None, "diloco.keys", f"{self.keys}: {err}") from None
        env = os.environ if environ is None else environ
        names = [self.keys_env_prefix + name for name in KEY_NAMES]
        for name in names:
            if len(env.get(name, "")) != 40:
                raise InputError("environment", name, "not a Curve key (40 Z85 characters): "
                                 "set diloco.keys to a keys folder, or the variables named "
                                 "by diloco.keys_env_prefix")  # fmt: skip
        return tuple(env[name].encode() for name in names)


def data_shard(rank: int, world: int, cfg: LearnerConfig | None) -> tuple[int, int]:
    """The (rank, world) a rank's batch feed reads with: a DiLoCo learner's ranks read
    their learner's slice of the global order (learner `index` of `learners`), so learners
    never see the same samples; outside an experiment, the rank's own (rank, world)."""
    if cfg is None or not cfg.address:
        return rank, world
    return cfg.index * world + rank, cfg.learners * world
