"""The soak's faults: which components can be killed, how each is found among the soak's
own processes (by command line: Ray sets an actor's process title to `ray::<Class>...`),
and the seeded choice of the next victim.

    targets = victims(driver_pid, table)       # {kind: [pids]}, below this launch only
    deck = Deck(rng)
    kind, pid = deck.choose(targets)           # the next kind of a shuffled round, then one
                                               # of its processes at random

A victim is SIGKILLed: no handler runs, as when a node loses power or the kernel's OOM
killer picks it. Killing the driver is the soak's to handle: it starts the same command
again, which must resume from the newest checkpoint (tests/soak/soak.py). With the Warden
layer, its worker and the Temporal dev server join the deck (`Deck(rng, warden=True)`): the
layer starts a killed one again (tests/soak/warden.py).
"""

from __future__ import annotations

import random

from tests.soak.procs import Proc, descendants

DRIVER = "driver"
KINDS = {
    "training worker": "ray::RayTrainWorker",
    "aux worker": "ray::AuxWorker",
    "aux proxy": "ray::AuxProxy",
}
"""Kind -> what its command line starts with (a Ray actor's process title)."""
SYNCHRONIZER = "synchronizer"
"""A DiLoCo pair's synchronizer: the soak's own child (tests/soak/pair.py)."""
WARDEN_WORKER, TEMPORAL = "warden worker", "temporal server"
"""The Warden layer's processes (`--warden`): the soak's own children (tests/soak/warden.py)."""
ALL = sorted([DRIVER, *KINDS])
PAIR = sorted([DRIVER, "training worker", SYNCHRONIZER])
"""The kinds of a DiLoCo pair's phase (its learners have no services)."""
WARDEN = sorted([WARDEN_WORKER, TEMPORAL])
"""The kinds the Warden layer adds to the run's."""


def victims(driver: int, table: dict[int, Proc]) -> dict[str, list[int]]:
    """The processes of each kind below the launch whose driver is `driver`, and the driver
    itself; kinds with none are left out."""
    below = descendants(driver, table)
    found: dict[str, list[int]] = {DRIVER: [driver]} if driver in table else {}
    for kind, prefix in KINDS.items():
        pids = sorted(pid for pid in below if table[pid].cmdline.startswith(prefix)
                      and table[pid].state != "Z")  # fmt: skip
        if pids:
            found[kind] = pids
    return found


class Deck:
    """Kinds in rounds: each round is every kind once, in a seeded random order, so that a
    short soak still kills each kind (a kind with no process now is passed over for the
    next; it comes again next round)."""

    def __init__(self, rng: random.Random, pair: bool = False, spare: tuple[str, ...] = (),
                 warden: bool = False):  # fmt: skip
        self.rng, self.left = rng, []
        kinds = (PAIR if pair else ALL) + (WARDEN if warden else [])
        self.kinds = [kind for kind in kinds if kind not in spare]

    def choose(self, targets: dict[str, list]) -> tuple[str, object] | None:
        """The next kind that has a process now, and one of them at random; None: none."""
        for _ in range(2 * len(self.kinds)):
            if not self.left:
                self.left = self.rng.sample(self.kinds, len(self.kinds))
            kind = self.left.pop(0)
            if kind in targets:
                return kind, self.rng.choice(targets[kind])
        return None


def interval(rng: random.Random, every_s: float) -> float:
    """Seconds to the next fault: uniform between half and one and a half `every_s`."""
    return rng.uniform(0.5 * every_s, 1.5 * every_s)
