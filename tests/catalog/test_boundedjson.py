"""catalog.boundedjson: nesting counted before parsing, non-finite numbers refused."""

from __future__ import annotations

import pytest

from catalog import boundedjson


@pytest.mark.parametrize(
    ("text", "deep"),
    [(b"1", 0), (b"[]", 1), (b'{"a": [1, {"b": 2}]}', 3), (b'["[[[[", "]"]', 1),
     (b'["\\"[[["]', 1), (b"[" * 50_000, 50_000)],
)  # fmt: skip
def test_depth_skips_strings(text, deep):
    assert boundedjson.depth(text) == deep


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested deeper than 32 levels"),
        (b'{"a": ' * 33 + b"1" + b"}" * 33, "nested deeper than 32 levels"),
        (b'{"a": NaN}', "NaN is not a number JSON allows"),
        (b"[-Infinity]", "-Infinity is not a number JSON allows"),
        (b"[1e999]", "number 1e999 is not finite"),
        (b"\xff", "not UTF-8 text"),
        (b"[1, 2", "Expecting"),
        (b"[" + b"9" * 5000 + b"]", "Exceeds the limit"),
    ],
)
def test_refusals_are_value_errors(text, error):
    with pytest.raises(ValueError, match=error):
        boundedjson.loads(text)


def test_values_within_bounds():
    assert boundedjson.loads(b'{"a": [1, 2.5, "x", null, true]}') == {
        "a": [1, 2.5, "x", None, True]
    }
    assert boundedjson.loads("[" * 32 + "]" * 32, max_depth=32)
