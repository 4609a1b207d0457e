"""Which persistent-straggler findings Warden hands to a node check: the one rule the
straggler sweep (`warden.stragglers`) and the gateway's `POST /v1/stragglers`
(`warden.gateway`) apply.

A straggler's node is skipped when it is gone, cordoned (by Warden, whose recovery owns it,
or by a person or GKE, whose cordon Warden leaves alone), or cleared by a node check less
than `rules.cleared_quiet_s` ago (the quiet `rules.classify` gives ambiguous signals too).
`skip_reason` is pure (tests/warden/test_handover.py holds its table); `screen` reads each
node once through the Kubernetes adapter.
"""

from __future__ import annotations

from datetime import datetime

from warden import annotations as ann
from warden import rules
from warden.errors import NotFound
from warden.faults import log
from warden.kube import WardenKube


def skip_reason(node: dict | None, now: datetime, quiet_s: float) -> str:
    """Why a straggler's node is not handed over ("" when it is): gone, cordoned (Warden's,
    a person's or GKE's), or cleared by a node check less than `quiet_s` ago."""
    if node is None:
        return "gone"
    facts = rules.node_facts(node, now)
    if facts.unschedulable:
        return "cordoned"
    if rules.since(facts, ann.CLEARED, quiet_s, now):
        return "recently cleared"
    return ""


def _node_or_none(kube: WardenKube, name: str) -> dict | None:
    try:
        return kube.get_node(name)
    except NotFound:
        return None


def screen(
    kube: WardenKube, findings: list[dict], now: datetime, quiet_s: float
) -> tuple[list[dict], dict[str, str]]:
    """The findings whose node is handed over, and {node: why} of the nodes skipped
    (each logged). Reads each finding's node once; other adapter errors propagate."""
    nodes = sorted({f["node"] for f in findings})
    verdicts = {n: skip_reason(_node_or_none(kube, n), now, quiet_s) for n in nodes}
    skipped = {node: why for node, why in verdicts.items() if why}
    for node, why in skipped.items():
        log.info("straggler on node %s not handed over: %s", node, why)
    return [f for f in findings if f["node"] not in skipped], skipped
