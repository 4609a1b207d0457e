"""The soak's choice of victims (tests/soak/chaos.py): seeded rounds of every kind."""

from __future__ import annotations

import random

from tests.soak.chaos import ALL, DRIVER, PAIR, SYNCHRONIZER, Deck


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
