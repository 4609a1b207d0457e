"""InputError keeps its parts across a pickle (a Ray worker's error reaches the driver) and
stays one line; `first_line` is every error's one line for logs, replies and messages."""

from __future__ import annotations

import pickle

import pytest

from catalog.errors import InputError, first_line


@pytest.mark.parametrize(
    ("source", "field", "line"),
    [("run.yaml", "ft.x", "run.yaml: ft.x: bad"), (None, "ft.x", "ft.x: bad"), (None, None, "bad")],
)
def test_an_input_error_survives_a_pickle(source, field, line):
    again = pickle.loads(pickle.dumps(InputError(source, field, "bad")))
    assert isinstance(again, InputError) and again.line() == line == str(again)
    assert (again.source, again.field, again.message) == (source, field, "bad")


@pytest.mark.parametrize(
    ("source", "field", "line"),
    [
        ("runs/x.yaml", "env.\n", "runs/x.yaml: env.\\n: bad"),  # a key a user wrote
        ("a\rb.yaml", "f\tg", "a\\rb.yaml: f\\tg: bad"),
        ("run.yaml", "x\x00\x1f\x7f", "run.yaml: x\\x00\\x1f\\x7f: bad"),
        ("rün.yaml", "é", "rün.yaml: é: bad"),  # only control characters are escaped
        ("a\u2028b.yaml", "c\x85d", "a\\u2028b.yaml: c\\x85d: bad"),  # Unicode's line breaks
        ("run.yaml", "\x1b[2Jx", "run.yaml: \\x1b[2Jx: bad"),  # a terminal's escape
    ],
)
def test_the_line_stays_one_line_whatever_the_file_or_field_holds(source, field, line):
    assert InputError(source, field, "bad").line() == line


@pytest.mark.parametrize(
    ("err", "kwargs", "line"),
    [
        (OSError("disk full\nmore"), {}, "disk full"),
        (OSError("  disk full  "), {"typed": True}, "OSError: disk full"),
        (TimeoutError(), {}, "TimeoutError"),  # no text: the type's name
        (TimeoutError(""), {"typed": True}, "TimeoutError"),
        (ValueError("x" * 10), {"limit": 5}, "xxxx…"),
        (ValueError("x" * 5), {"limit": 5}, "xxxxx"),
        (ValueError("a\u2028b"), {}, "a"),  # Unicode's line breaks end the line
        (ValueError("\x1b[2Jhi\x00"), {}, "\\x1b[2Jhi\\x00"),  # a peer's terminal escape
    ],
)
def test_an_errors_first_line_is_printable_and_bounded(err, kwargs, line):
    assert first_line(err, **kwargs) == line
