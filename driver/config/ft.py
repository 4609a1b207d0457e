"""Fault-tolerance configuration: one typed dataclass, the `ft.*` keys of the driver config.

    from driver.config.ft import FtConfig
    ft = FtConfig(enabled=True, min_replicas=2, heartbeat_timeout_ms=500)
    ft.validate("run.yaml")                        # one-line InputError naming the field
    ft.check_layout(fsdp_size=1, replica_group_size=None, world=4, source="run.yaml")

Importing this module imports neither torch nor torchft. See docs/ft.md.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from catalog.errors import InputError


@dataclass
class FtConfig:
    """Live fault tolerance with torchft: replica groups that survive the loss of a group."""

    enabled: bool = False
    """Run the loop under torchft: a Lighthouse on the driver, a Manager per replica group,
    an all-or-nothing optimizer step, gradients averaged through torchft's process group."""

    min_replicas: int = 1
    """Fewest live replica groups that may commit a step; below it training stops with one
    line giving the reason (the checkpoint path still works)."""

    join_timeout_ms: int = 1000
    """Lighthouse: once `min_replicas` groups asked for a quorum, how long it waits for the
    other heartbeating groups before forming a quorum without them."""

    heartbeat_timeout_ms: int = 500
    """Lighthouse: a group whose heartbeat is older than this is dead for the next quorum
    (torchft's default is 5000; the time from a kill to the next commit follows it)."""

    heartbeat_interval_ms: int = 100
    """How often each group's Manager sends a heartbeat to the Lighthouse."""

    quorum_tick_ms: int = 50
    """Lighthouse: how often it re-checks whether a pending quorum can be formed."""

    quorum_timeout_s: float = 60.0
    """How long a group waits for a quorum before it gives up (the stop below the minimum
    takes this long; it also bounds the wait for a slow straggler)."""

    timeout_s: float = 30.0
    """Collectives, the commit vote and healing transfers: how long before a peer counts
    as failed."""

    watchdog_s: float = 180.0
    """A member whose step (quorum wait included) runs longer than this ends its process, so
    its replica group is replaced (driver.ft.watchdog: a hung member, not only a dead one);
    also Ray Train's health-check timeout. 0: off. More than quorum_timeout_s."""

    start_timeout_s: float = 300.0
    """How long the groups present at start wait for each other before the first quorum."""

    constant_batch: bool = True
    """Keep the global batch constant (ReCoVer): while a group is missing, the survivors
    take over its micro-batches by raising their gradient accumulation, so every committed
    step consumes the same samples in the same order as a failure-free run. Off: the global
    batch shrinks with the live groups and the learning rate follows `lr_scaling`."""

    lr_scaling: str = "linear"
    """With `constant_batch` off: `linear` scales the learning rate by live/total groups
    while groups are missing, `none` keeps it."""

    shrink: bool = True
    """After a group is lost, the lowest live group asks Warden to shrink the RayCluster's
    worker group, naming the lost group's pods (locally: a logged no-op)."""

    shrink_after_quorums: int = 3
    """A group missing from the quorum is lost (a shrink, not a straggler) only once it
    has been missing from this many quorums in a row (driver/ft/lost.py)..."""

    shrink_after_s: float = 120.0
    """... and either its pods are reported dead (their Ray nodes) or it has been missing
    this long (a replacement that starts and heals within it keeps its pod)."""

    def validate(self, source: str | None = None) -> None:
        """Raise InputError (one line naming the field) for a bad value."""
        positive = (
            "join_timeout_ms",
            "heartbeat_timeout_ms",
            "heartbeat_interval_ms",
            "quorum_tick_ms",
            "quorum_timeout_s",
            "timeout_s",
            "start_timeout_s",
        )
        if self.min_replicas < 1:
            raise InputError(source, "ft.min_replicas", "must be >= 1")
        if self.shrink_after_quorums < 1:
            raise InputError(source, "ft.shrink_after_quorums", "must be >= 1")
        if self.shrink_after_s < 0:
            raise InputError(source, "ft.shrink_after_s", "must be >= 0")
        for name in positive:
            if not getattr(self, name) > 0:
                raise InputError(source, f"ft.{name}", "must be > 0")
        if self.watchdog_s and self.watchdog_s <= self.quorum_timeout_s:
            raise InputError(source, "ft.watchdog_s", "must be 0 or more than ft.quorum_timeout_s")
        if self.watchdog_s < 0:
            raise InputError(source, "ft.watchdog_s", "must not be negative")
        if self.heartbeat_interval_ms >= self.heartbeat_timeout_ms:
            raise InputError(source, "ft.heartbeat_interval_ms", "must be < heartbeat_timeout_ms")
        if self.lr_scaling not in LR_SCALINGS:
            message = f"must be one of {', '.join(LR_SCALINGS)}, got {self.lr_scaling!r}"
            raise InputError(source, "ft.lr_scaling", message)

    def check_layout(
        self, fsdp_size: int, replica_group_size: int | None, world: int | None, source=None
    ) -> None:
        """Refuse, in one line, a layout torchft cannot run: fewer replica groups than
        `ft.min_replicas`. A replica group is `replica_group_size` workers (FSDP of
        `fsdp_size` inside it, torchft across groups)."""
        if not self.enabled or world is None:
            return
        groups = world // (replica_group_size or fsdp_size or 1)
        if groups < self.min_replicas:
            message = f"{groups} replica groups are fewer than ft.min_replicas={self.min_replicas}"
            raise InputError(source, "ft.min_replicas", message)

    @classmethod
    def from_dict(cls, data: dict, source: str | None = None) -> FtConfig:
        """Build from a plain mapping (e.g. the `ft` node of the Hydra config)."""
        known = {f.name for f in fields(cls)}
        for key in data:
            if key not in known:
                raise InputError(source, f"ft.{key}", "unknown key")
        config = cls(**{k: v for k, v in data.items()})
        config.validate(source)
        return config


LR_SCALINGS = ("linear", "none")
