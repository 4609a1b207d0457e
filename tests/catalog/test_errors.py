"""InputError keeps its parts across a pickle (a Ray worker's error reaches the driver)."""

from __future__ import annotations

import pickle

import pytest

from catalog.errors import InputError


@pytest.mark.parametrize(
    ("source", "field", "line"),
    [("run.yaml", "ft.x", "run.yaml: ft.x: bad"), (None, "ft.x", "ft.x: bad"), (None, None, "bad")],
)
def test_an_input_error_survives_a_pickle(source, field, line):
    again = pickle.loads(pickle.dumps(InputError(source, field, "bad")))
    assert isinstance(again, InputError) and again.line() == line == str(again)
    assert (again.source, again.field, again.message) == (source, field, "bad")
