"""docs/observability.md matches the code: every threshold with its default, every query."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from observability import stragglers

DOC = (Path(__file__).resolve().parents[2] / "docs" / "observability.md").read_text()


def test_thresholds_and_queries_are_documented():
    for f in fields(stragglers.Thresholds):
        default = getattr(stragglers.DEFAULT, f.name)
        assert f"| `{f.name}` | {default:g} |" in DOC, f.name
    for name in stragglers.QUERIES:
        assert f"`{name}.sql`" in DOC, name
