"""JSON from a peer, parsed within bounds: nesting depth checked before parsing, no
non-finite numbers.

    from catalog.boundedjson import loads
    value = loads(raw_bytes, max_depth=32)   # ValueError (one line) for anything else

Python's parser recurses per level of nesting, so a few kilobytes of `[[[[...` raise
RecursionError (not ValueError) in whatever thread parses them; `depth` counts the levels
first, without recursion. NaN, Infinity and numbers too large for a float (`1e999`) are
refused: no peer's message may carry a non-finite number. Integers keep Python's bound on
digits (a ValueError beyond it).
"""

from __future__ import annotations

import json
import math
import re

MAX_DEPTH = 32
_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_DROP = bytes(b for b in range(256) if b not in b"[]{}")


def depth(data: bytes) -> int:
    """The deepest nesting of arrays and objects in JSON text (strings skipped)."""
    skeleton = _STRINGS.sub(b"", data).translate(None, _DROP)
    deepest = level = 0
    for byte in skeleton:
        if byte in (0x5B, 0x7B):  # [ {
            level += 1
            deepest = max(deepest, level)
        else:
            level -= 1
    return deepest


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:20]} is not finite")
    return value


def _constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def loads(data: bytes | str, max_depth: int = MAX_DEPTH):
    """The JSON value of `data`; ValueError for text nested deeper than `max_depth`, for
    invalid JSON or text that is not UTF-8, and for non-finite numbers."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    if depth(raw) > max_depth:
        raise ValueError(f"nested deeper than {max_depth} levels")
    try:
        return json.loads(raw, parse_float=_finite, parse_constant=_constant)
    except RecursionError:  # not reached after the depth check; kept as a guard
        raise ValueError(f"nested deeper than {max_depth} levels") from None
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None
