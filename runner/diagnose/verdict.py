"""The verdict: what happened, who, on what evidence, what to do; as JSON and as text.

    v = decide(findings, ev)          # the rules' verdict (source "rules")
    print(render(v)); json.dumps(v.to_json())

`decide` keeps the finding of the highest priority (runner.diagnose.rules.PRIORITY; a
process that died outranks the connection errors and timeouts of its peers), then the
highest confidence. Without any finding the verdict is `unknown` / `stop` with a low
confidence: the rules give a verdict whether or not a model is configured.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from runner.diagnose.rules import Finding

DEAD_PRIORITY = 65  # a dead process: above hang (60) and network (55)
FINISHED_PRIORITY = 200  # a run that trained every step: above everything


@dataclass
class Verdict:
    decision: str
    category: str
    confidence: float
    why: str
    culprits: list[dict] = field(default_factory=list)
    evidence: list[dict] = field(default_factory=list)
    proposal: dict = field(default_factory=dict)
    source: str = "rules"
    summary: str = ""
    also: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    run: dict = field(default_factory=dict)
    model: dict | None = None

    def to_json(self) -> dict:
        out = {
            k: getattr(self, k)
            for k in (
                "decision",
                "category",
                "culprits",
                "evidence",
                "proposal",
                "confidence",
                "source",
                "why",
                "summary",
                "also",
                "notes",
                "run",
            )
        }
        if self.model is not None:
            out["model"] = self.model
        return out


def priority(f: Finding) -> int:
    if f.decision == "no_failure":  # the run finished: what it survived needs nothing
        return FINISHED_PRIORITY
    if f.category == "killed" and f.culprits:
        return DEAD_PRIORITY
    return f.priority


def decide(findings: list[Finding]) -> tuple[Finding | None, list[Finding]]:
    """(the deciding finding or None, the others by priority)."""
    ranked = sorted(findings, key=lambda f: (priority(f), f.confidence), reverse=True)
    return (ranked[0], ranked[1:]) if ranked else (None, [])


def culprit(c: dict) -> dict:
    return {"rank": c.get("rank"), "pod": c.get("pod") or "", "node": c.get("node") or ""}


def verdict(top: Finding | None, others: list[Finding]) -> Verdict:
    if top is None:
        return Verdict(
            "stop",
            "unknown",
            0.2,
            "no rule recognised the failure: a person should "
            "read the evidence (a configured model may say more)",
        )
    return Verdict(
        top.decision,
        top.category,
        round(top.confidence, 2),
        top.why,
        [culprit(c) for c in top.culprits],
        [x.quote() for x in top.evidence],
        also=[{"category": f.category, "decision": f.decision, "why": f.why} for f in others],
    )


def render(v: Verdict) -> str:
    """The verdict as a person reads it at the terminal."""
    who = (
        ", ".join(
            " ".join(
                p
                for p in (
                    f"rank {c['rank']}" if c["rank"] is not None else "",
                    f"pod {c['pod']}" if c["pod"] else "",
                    f"node {c['node']}" if c["node"] else "",
                )
                if p
            )
            for c in v.culprits
        )
        or "-"
    )
    lines = [
        f"run:        {v.run.get('team', '?')}/{v.run.get('run', '?')}",
        f"decision:   {v.decision}",
        f"category:   {v.category}   (confidence {v.confidence:.2f}, from the {v.source})",
        f"culprits:   {who}",
        f"why:        {v.why}",
    ]
    if v.summary:
        lines.append(f"summary:    {v.summary}")
    lines.append("evidence:")
    lines += [f"  {e['source']}: {e['line'][:240]}" for e in v.evidence] or ["  (none)"]
    if v.proposal:
        lines.append(f"proposal:   {v.proposal.get('text', '')}")
        for key in ("resume", "avoid_nodes", "warden_check", "set", "remove", "code"):
            if v.proposal.get(key):
                lines.append(f"  {key}: {v.proposal[key]}")
    for other in v.also[:4]:
        lines.append(f"also seen:  {other['category']} ({other['decision']}): {other['why']}")
    lines += [f"note:       {n}" for n in v.notes]
    return "\n".join(lines)
