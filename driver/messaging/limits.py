"""What a receiver bounds before it trusts a message: JSON depth, parse errors, and who
was refused how often.

- `loads(text)`: JSON whose nesting is checked BEFORE it is parsed (`MAX_DEPTH` levels of
  `[`/`{`): a document of 10 KB of brackets would otherwise raise RecursionError deep in
  the parser (or, in a recursive walk after it, in the receiver). Every parse error of any
  kind (RecursionError, ValueError, UnicodeError, MemoryError, ...) becomes
  `WireError("garbage")`, the one refusal the serving loops count.
- `too_deep(text)`: whether `[`/`{` nest deeper than `MAX_DEPTH` outside JSON strings (a
  bracket count first: a document with no more brackets than the limit is not scanned);
  `depth(text)` the exact depth.
- `Ledger`: refusals per reason and per peer (a bounded table: the most recent peers), for
  a serving loop's stats.

    doc = loads(str(frame, "utf-8"))          # WireError("garbage") on anything wrong
    ledger.refuse(peer, "oversized"); ledger.stats() -> {"refused": {...}, "peers": {...}}
"""

from __future__ import annotations

import json
import re
from collections import Counter, OrderedDict
from typing import Any

MAX_DEPTH = 100
"""Nesting levels of `[` and `{` a JSON document may have (the wire's payloads use < 10)."""
MAX_PEERS = 256
"""Peers a `Ledger` keeps counts for (the least recently refused are forgotten)."""
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)  # a JSON string, unrolled
_KEEP = b"[]{}"
_DROP = bytes(c for c in range(256) if c not in _KEEP)
_STEP = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # +1 / -1 as int8
_decode = json.JSONDecoder().decode


class WireError(ValueError):
    """A message that does not parse; `reason` is "garbage", "truncated" or "oversized"."""

    def __init__(self, reason: str, message: str):
        super().__init__(f"{reason}: {message}")
        self.reason = reason


def too_deep(text: str, limit: int = MAX_DEPTH) -> bool:
    """Whether `[`/`{` nest deeper than `limit` in `text` (outside JSON strings)."""
    return text.count("[") + text.count("{") > limit and depth(text) > limit


def depth(text: str) -> int:
    """How deep `[`/`{` nest in `text` outside JSON strings (exact for valid JSON; an
    unclosed string counts its brackets, so an invalid document errs on the deep side)."""
    import numpy as np

    brackets = _STRING.sub("", text).encode("utf-8", "surrogatepass").translate(_STEP, _DROP)
    if not brackets:
        return 0
    return int(np.cumsum(np.frombuffer(brackets, np.int8), dtype=np.int64).max())


def loads(text: str) -> Any:
    """The JSON value of `text`, nesting checked first; WireError("garbage") on any error."""
    try:
        if too_deep(text):
            raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
        return _decode(text)
    except Exception as err:  # noqa: BLE001 (any parse error is a refusal, never a crash)
        raise WireError("garbage", f"JSON: {type(err).__name__}: {str(err)[:200]}") from None


class Ledger:
    """Refusals of a serving loop: per reason (all of them) and per peer (the `MAX_PEERS`
    most recently refused), so a flood from one peer shows up as that peer's."""

    def __init__(self, max_peers: int = MAX_PEERS):
        self.reasons: Counter[str] = Counter()
        self.peers: OrderedDict[str, int] = OrderedDict()
        self.max_peers = max_peers

    def refuse(self, peer: Any, reason: str) -> None:
        """Count a refusal (`peer` None: one the peer of which is not known)."""
        self.reasons[reason] += 1
        if peer is None:
            return
        key = peer.hex() if isinstance(peer, bytes | bytearray) else str(peer)
        self.peers[key] = self.peers.pop(key, 0) + 1
        if len(self.peers) > self.max_peers:
            self.peers.popitem(last=False)

    @property
    def total(self) -> int:
        return sum(self.reasons.values())

    def stats(self, top: int = 8) -> dict:
        """{"refused": per reason, "refused_peers": the `top` peers by count}."""
        worst = sorted(self.peers.items(), key=lambda kv: -kv[1])[:top]
        return {"refused": dict(self.reasons), "refused_peers": dict(worst)}
