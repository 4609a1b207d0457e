"""What the verdict proposes: a relaunch (resume, avoided nodes, the config fix) or a fix.

    p = build(verdict, finding, ev)   # {"action", "text", "resume", "avoid_nodes", "set", ...}

The proposal only describes; nothing is changed here. `runner diagnose --propose` turns it
into a run-file change on a branch (runner.diagnose.relaunch), and a person approves it by
merging. A relaunch (a new run name: runner.diagnose.relaunch) resumes from the failed run's newest
committed checkpoint (`newest_checkpoint`: a `step-<n>/COMMITTED` under
`<checkpoint.root>/<team>/<run>`, read here: a local folder, or the bucket through fsspec
with this user's credentials). When none can be seen from here the proposal says so
(`resume: null`): the relaunch would start from step 0 unless a person sets `resume:`.
"""

from __future__ import annotations

import re
from pathlib import Path

from runner.diagnose.evidence import Evidence
from runner.diagnose.rules import Finding, lookup

RELAUNCH = ("restart", "restart_excluding", "fix_config")
_STEP = re.compile(r"^step-(\d+)$")


def newest_checkpoint(ev: Evidence) -> str | None:
    """The URI of the run's newest committed checkpoint, when its storage is readable here
    (a local folder; gs:// through fsspec when installed and signed in), else None."""
    said = (ev.summary or {}).get("ckpt_uri")  # the run's own word at its end
    root = lookup(ev.config, "checkpoint.root")
    if not isinstance(root, str) or not ev.team or not ev.run:
        return said if isinstance(said, str) and said else None
    base = f"{root.rstrip('/')}/{ev.team}/{ev.run}"
    try:
        if "://" in base and not base.startswith("file://"):
            import fsspec

            fs, path = fsspec.core.url_to_fs(base)
            names = [p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(path)]
            committed = [n for n in names if _STEP.match(n) and fs.exists(f"{path}/{n}/COMMITTED")]
        else:
            folder = Path(base.removeprefix("file://"))
            if not folder.is_absolute():
                folder = ev.folder / folder if (ev.folder / folder).exists() else folder
            committed = [p.name for p in folder.glob("step-*") if (p / "COMMITTED").exists()]
    except Exception:  # no fsspec, no credentials, no bucket: what the run said, if anything
        committed = []
    steps = sorted(int(_STEP.match(n)[1]) for n in committed if _STEP.match(n))
    if steps:
        return f"{base}/step-{steps[-1]}"
    return said if isinstance(said, str) and said else None


def build(decision: str, finding: Finding | None, ev: Evidence) -> dict:
    change = dict(finding.change) if finding else {}
    out: dict = {"action": decision}
    if decision in RELAUNCH:
        out["resume"] = newest_checkpoint(ev)
        for key in ("avoid_nodes", "warden_check", "set", "remove"):
            if change.get(key):
                out[key] = change[key]
    if decision == "fix_code" and change.get("code"):
        out["code"] = change["code"]
    out["text"] = text(decision, out)
    return out


def text(decision: str, p: dict) -> str:
    resume = p.get("resume")
    start = (
        f"resuming from {resume}"
        if resume
        else "from step 0: no committed checkpoint of the run was found from here (set resume: "
        "to one)"
    )
    if decision == "restart":
        return f"relaunch as it was, {start}"
    if decision == "restart_excluding":
        nodes = ", ".join(p.get("avoid_nodes", []))
        return f"relaunch away from {nodes} (Warden checks them), {start}"
    if decision == "fix_config":
        parts = [f"{k}={v}" for k, v in (p.get("set") or {}).items()]
        parts += [f"without {k}" for k in p.get("remove") or []]
        return f"relaunch with {', '.join(parts) or 'the config fixed'}, {start}"
    if decision == "fix_code":
        c = p.get("code") or {}
        where = f"{c.get('file')}:{c.get('line')} in {c.get('function')}" if c else "the code"
        return f"fix {where} ({c.get('error', 'the error')}), then relaunch"
    if decision == "stop":
        return "do not relaunch until a person fixes the cause"
    return "nothing to do"
