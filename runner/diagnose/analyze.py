"""The failure analysis: evidence -> rules -> verdict (-> the model's summary).

    from runner.diagnose.analyze import analyze
    v = analyze(Path("outputs/research/tiny-lm"))            # rules only
    v = analyze(path, model=client)                          # + a model (runner.diagnose.model)

The rules decide; a model, when configured, writes the summary and may name a category
for what the rules leave `unknown`, never changing a decision the rules made
(runner.diagnose.model.apply). A bundle's signed manifest is checked when it has one
(`key`: the run's key, catalog.runkey; without it only the files' digests are checked).
"""

from __future__ import annotations

from pathlib import Path

from runner.diagnose import evidence, proposal, rules
from runner.diagnose.verdict import Verdict, decide, verdict


def findings(ev: evidence.Evidence) -> list[rules.Finding]:
    out = []
    for rule in rules.RULES:
        out.extend(rule(ev))
    return out


def check_bundle(ev: evidence.Evidence, key: bytes | None) -> list[str]:
    from observability import bundle

    if ev.bundle is None or not (ev.bundle / bundle.MANIFEST).exists():
        return []
    problems = bundle.check(ev.bundle, key, ev.team, ev.run)
    if problems:
        return [f"bundle {ev.bundle.name}: {p}" for p in problems[:5]]
    return [
        f"bundle {ev.bundle.name}: signed manifest checked"
        + ("" if key is not None else " (digests only: no key to check its signature)")
    ]


def analyze(path: Path, model=None, key: bytes | None = None) -> Verdict:
    ev = evidence.load(Path(path))
    top, others = decide(findings(ev))
    v = verdict(top, others)
    v.run = {
        "team": ev.team,
        "run": ev.run,
        "folder": str(ev.folder),
        "bundle": ev.bundle.name if ev.bundle else None,
    }
    v.proposal = proposal.build(v.decision, top, ev)
    v.notes += check_bundle(ev, key) + ev.notes
    if model is not None:
        from runner.diagnose import model as llm

        llm.consult(model, v, ev)
    return v
