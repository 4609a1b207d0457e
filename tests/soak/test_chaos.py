"""The soak's choice of victims (tests/soak/chaos.py): seeded rounds of every kind."""

from __future__ import annotations

import random

from tests.soak.chaos import ALL, DRIVER, PAIR, SYNCHRONIZER, TEMPORAL, WARDEN, WARDEN_WORKER, Deck
from tests.soak.main import parse


def test_each_round_of_faults_kills_every_kind_once():
    deck = Deck(random.Random(1))
    targets = {kind: [index + 10] for index, kind in enumerate(ALL)}
    rounds = [deck.choose(targets)[0] for _ in range(3 * len(ALL))]
    for start in range(0, len(rounds), len(ALL)):
        assert sorted(rounds[start : start + len(ALL)]) == ALL
    only = Deck(random.Random(1))
    assert [only.choose({DRIVER: [7]}) for _ in range(3)] == [(DRIVER, 7)] * 3
    assert Deck(random.Random(1)).choose({}) is None


def test_a_pair_s_rounds_hold_its_own_kinds():
    deck = Deck(random.Random(1), pair=True)
    targets = {kind: [kind] for kind in [*ALL, SYNCHRONIZER]}
    assert sorted(deck.choose(targets)[0] for _ in PAIR) == PAIR


def test_the_warden_layer_adds_its_worker_and_server_to_each_round():
    deck = Deck(random.Random(1), warden=True)
    kinds = sorted([*ALL, *WARDEN])
    targets = {kind: [kind] for kind in kinds}
    assert sorted(deck.choose(targets)[0] for _ in kinds) == kinds
    only = Deck(random.Random(1), spare=tuple(ALL), warden=True)
    assert sorted(only.choose(targets)[0] for _ in range(2)) == [TEMPORAL, WARDEN_WORKER]
    assert WARDEN_WORKER not in Deck(random.Random(1)).kinds  # only with --warden


def test_spare_accepts_the_warden_kinds():
    args = parse(["--minutes", "1", "--warden", "--spare", "temporal server,driver"])
    assert args.warden and args.spare == ("temporal server", "driver")
