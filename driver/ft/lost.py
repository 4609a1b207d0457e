"""When a replica group missing from the quorum is lost, not late: the rule that decides a
shrink, and the bookkeeping the lowest live group keeps for it.

A group can be left out of a quorum while alive: a straggler past `ft.join_timeout_ms`, a
replacement still starting or healing. Shrinking then would delete a healthy pod (Warden
names the group's pods to KubeRay). So a group is **lost** only when it has been missing
from `ft.shrink_after_quorums` quorums in a row and either its pods are reported dead (the
driver sees their Ray nodes dead) or it has been missing for `ft.shrink_after_s`:

| quorums missing | seconds missing | pods dead | verdict |
| --- | --- | --- | --- |
| 0 | - | - | present |
| < shrink_after_quorums | any | any | late |
| >= shrink_after_quorums | any | yes | lost |
| >= shrink_after_quorums | >= shrink_after_s | no | lost |
| >= shrink_after_quorums | < shrink_after_s | no | late |

    decider = ShrinkDecider(groups=4, ranks_of=topology.ranks_of, pods_of=ask_channel)
    request = decider.quorum(live_groups=[0, 1, 3])   # a ShrinkRequest, or None

`pods_of(ranks)` answers which pods host only those ranks and whether each is dead (the
run's channel method `pods_of`, driver.channel.state); it is asked only about groups already
missing from enough quorums, about each at most once every `ask_every_s`. Each lost group is asked
for once; a group that comes back (replaced, grown back) is tracked afresh.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from driver.ft.shrink import ShrinkRequest

PRESENT, LATE, LOST = "present", "late", "lost"


@dataclass(frozen=True)
class LossRule:
    """`ft.shrink_after_quorums` and `ft.shrink_after_s`."""

    quorums: int = 3
    seconds: float = 120.0


def verdict(missing_quorums: int, missing_s: float, dead: bool, rule: LossRule) -> str:
    """present, late or lost: the table above."""
    if missing_quorums <= 0:
        return PRESENT
    if missing_quorums < rule.quorums:
        return LATE
    return LOST if dead or missing_s >= rule.seconds else LATE


@dataclass
class Missing:
    since: float
    quorums: int = 0
    dead: bool = False
    asked: float = float("-inf")
    """When the channel was last asked whether its pods are dead."""


@dataclass
class ShrinkDecider:
    """The lowest live group's view of missing groups, quorum by quorum."""

    groups: int
    """Replica groups at start."""
    ranks_of: Callable[[int], Iterable[int]]
    """A group's ranks (driver.parallel.Topology.ranks_of)."""
    pods_of: Callable[[list[int]], dict[str, bool]] | None = None
    """Pods hosting only these ranks -> dead (None: no pod is known, only time decides)."""
    rule: LossRule = field(default_factory=LossRule)
    clock: Callable[[], float] = time.monotonic
    ask_every_s: float = 5.0
    missing: dict[int, Missing] = field(default_factory=dict)
    asked: set[int] = field(default_factory=set)
    """Groups already in a request."""

    def quorum(self, live_groups: Iterable[int], asking: bool = True) -> ShrinkRequest | None:
        """Note one quorum's live groups; the request for the groups lost now, if any.
        Every group notes every quorum (so the one that becomes the lowest live group knows
        how long each group has been missing); only the asking one (the lowest live
        group, `asking`) asks the channel and gets requests."""
        now, live = self.clock(), set(live_groups)
        for group in range(self.groups):
            if group in live:
                self.missing.pop(group, None)
                self.asked.discard(group)
            else:
                self.missing.setdefault(group, Missing(now)).quorums += 1
        suspects = [g for g, m in sorted(self.missing.items())
                    if g not in self.asked and m.quorums >= self.rule.quorums]  # fmt: skip
        if not asking:
            return None
        for group in suspects:
            m = self.missing[group]
            if self.pods_of is not None and not m.dead and now - m.asked >= self.ask_every_s:
                m.asked = now
                pods = self._pods([group])
                m.dead = bool(pods) and all(pods.values())
        lost = [g for g in suspects if self._verdict(g, now) == LOST]
        if not lost:
            return None
        self.asked.update(lost)
        ranks = [rank for g in lost for rank in self.ranks_of(g)]
        pods = tuple(sorted(self._pods(ranks)))
        before = self.groups - len(self.asked - set(lost))  # earlier requests took theirs
        return ShrinkRequest(before, before - len(lost), tuple(lost), pods)

    def _verdict(self, group: int, now: float) -> str:
        m = self.missing[group]
        return verdict(m.quorums, now - m.since, m.dead, self.rule)

    def _pods(self, ranks: list[int]) -> dict[str, bool]:
        if self.pods_of is None:
            return {}
        try:
            return dict(self.pods_of(ranks))
        except Exception:  # noqa: BLE001 (a driver that does not answer: no pods named)
            return {}


def rule_of(ft) -> LossRule:
    """The rule of the `ft` config node (driver.config.ft.FtConfig)."""
    return LossRule(int(ft.shrink_after_quorums), float(ft.shrink_after_s))


def channel_pods(client, timeout_s: float = 5.0) -> Callable[[list[int]], dict[str, bool]]:
    """`pods_of` through the run's channel (a driver.channel client)."""
    return lambda ranks: client.call("pods_of", [int(r) for r in ranks], timeout_s=timeout_s)
