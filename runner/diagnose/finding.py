"""A rule's finding and the helpers every rule shares (runner.diagnose.rules).

A `Finding` is what one rule found: its category and decision, a confidence, one line of
why, the culprits ({rank, pod, node}), the evidence lines (runner.diagnose.scan.Line) and
the change it proposes (`avoid_nodes`, `warden_check`, `set`, `remove`, `code`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from runner.diagnose.evidence import Evidence, Failure
from runner.diagnose.scan import Line

DECISIONS = ("restart", "restart_excluding", "fix_config", "fix_code", "stop", "no_failure")
CATEGORIES = (
    "user_code",
    "config",
    "numerics",
    "oom",
    "hardware",
    "network",
    "hang",
    "preemption",
    "storage",
    "platform",
    "killed",
    "unknown",
)
PRIORITY = {
    "hardware": 100,
    "oom": 90,
    "storage": 85,
    "numerics": 80,
    "config": 75,
    "user_code": 70,
    "hang": 60,
    "network": 55,
    "preemption": 50,
    "killed": 40,
    "platform": 30,
    "unknown": 0,
}
MAX_EVIDENCE = 8


@dataclass
class Finding:
    category: str
    decision: str
    confidence: float
    why: str
    culprits: list[dict] = field(default_factory=list)
    evidence: list[Line] = field(default_factory=list)
    change: dict = field(default_factory=dict)

    @property
    def priority(self) -> int:
        return PRIORITY.get(self.category, 0)


def ordered_failures(ev: Evidence) -> list[Failure]:
    """Failure records, the first in time first (records without a time last)."""
    return sorted(ev.failures.values(), key=lambda f: (f.time is None, f.time or 0, f.rank))


def failure_line(f: Failure, pattern: re.Pattern | None = None) -> Line:
    """The line of a failure record to quote: the one matching `pattern`, else the last."""
    lines = [x for x in f.traceback.splitlines() if x.strip()]
    pick = next((x for x in reversed(lines) if pattern and pattern.search(x)), None)
    text = pick or (lines[-1] if lines else f.error)
    number = f.traceback.splitlines().index(text) + 1 if text in f.traceback.splitlines() else 0
    return Line(f"{ev_bundle_name(f)}", number, text.strip(), f.rank, f.pod, f.node)


def ev_bundle_name(f: Failure) -> str:
    return f.source or f"rank-{f.rank}.txt"


def lines_matching(ev: Evidence, pattern: re.Pattern, limit: int = MAX_EVIDENCE) -> list[Line]:
    return [x.narrow(pattern) for x in ev.lines if pattern.search(x.text)][:limit]


def text_of(f: Failure) -> str:
    return f"{f.error}\n{f.traceback}"


def first_match(text: str, pattern: re.Pattern, source: str) -> Line:
    for number, line in enumerate(text.splitlines(), 1):
        if pattern.search(line):
            return Line(source, number, line.strip())
    return Line(source, 0, text.strip().splitlines()[0] if text.strip() else "")


def lookup(data: dict, dotted: str):
    for key in dotted.split("."):
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data
