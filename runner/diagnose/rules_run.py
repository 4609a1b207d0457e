"""Rules of the run's course: numerics, the config, killed processes, preemptions, hangs."""

from __future__ import annotations

import math
import re

from runner.diagnose.evidence import Evidence
from runner.diagnose.finding import (
    MAX_EVIDENCE,
    Finding,
    failure_line,
    first_match,
    lines_matching,
    lookup,
    ordered_failures,
    text_of,
)
from runner.diagnose.patterns import (
    CONFIG_ERROR,
    DEAD,
    INJECTED,
    KILLED,
    NONFINITE,
    PREEMPTED,
    TIMEOUT,
)
from runner.diagnose.scan import Line


def numerics(ev: Evidence) -> list[Finding]:
    bad = [(s, v) for s, v in ev.losses if not math.isfinite(v)]
    lines = lines_matching(ev, NONFINITE)
    if not bad and not lines:
        return []
    lr = lookup(ev.config, "optimizer.lr")
    change = (
        {"set": {"optimizer.lr": float(f"{lr / 10:.3g}")}} if isinstance(lr, int | float) else {}
    )
    why = "the loss became non-finite"
    if bad:
        why += f" at step {bad[0][0]} ({bad[0][1]})"
        lines = [Line("metrics.jsonl", 0, f"step {bad[0][0]}: loss {bad[0][1]}")] + lines
    if isinstance(lr, int | float):
        why += f" with optimizer.lr={lr:g}; lower it tenfold"
    return [Finding("numerics", "fix_config", 0.9, why, [], lines[:MAX_EVIDENCE], change)]


def config(ev: Evidence) -> list[Finding]:
    for f in ordered_failures(ev):
        if m := INJECTED.search(text_of(f)):
            return [
                Finding(
                    "config",
                    "fix_config",
                    0.95,
                    f"debug.fail_at_step={m[1]} is set: the config injects this failure",
                    [ev.where(f.rank)],
                    [failure_line(f, INJECTED)],
                    {"remove": ["debug.fail_at_step", "debug.fail_rank"]},
                )
            ]
    lines = [x for x in ev.driver_lines + ev.lines if CONFIG_ERROR.search(x.text)]
    if lines and not ev.failures:
        return [
            Finding(
                "config",
                "fix_config",
                0.7,
                "the driver refused the config",
                [],
                lines[:MAX_EVIDENCE],
            )
        ]
    return []


def killed(ev: Evidence) -> list[Finding]:
    """A process that died (SIGKILL, a lost worker), a dead service worker, ft below its
    minimum: restart. A dead training process explains its peers' connection errors and
    timeouts, so this finding outranks network and hang findings (`DEAD_PRIORITY`)."""
    dead = [f for f in ordered_failures(ev) if DEAD.search(text_of(f))]
    if dead:
        lines = [failure_line(f, DEAD) for f in dead]
        return [
            Finding(
                "killed",
                "restart",
                0.85,
                f"rank {', '.join(str(f.rank) for f in dead)}'s process died (killed "
                "from outside: SIGKILL, an operator, a node agent); relaunch",
                [ev.where(f.rank) for f in dead],
                lines[:MAX_EVIDENCE],
            )
        ]
    texts = [(f, text_of(f)) for f in ordered_failures(ev)]
    hits = [failure_line(f, KILLED) for f, t in texts if KILLED.search(t)]
    hits += [x for x in ev.driver_lines + ev.lines if KILLED.search(x.text)]
    if ev.error_text and KILLED.search(ev.error_text) and not hits:
        hits.append(first_match(ev.error_text, KILLED, "error.txt"))
    if not hits:
        return []
    service = re.search(r"aux service (\S+)|AuxUnavailable", " ".join(x.text for x in hits))
    why = (
        "an auxiliary service's worker died"
        if service
        else "a process of the run was killed or lost"
    ) + "; relaunch"
    return [Finding("killed", "restart", 0.7, why, [], hits[:MAX_EVIDENCE])]


def preemption(ev: Evidence) -> list[Finding]:
    summary = ev.summary or {}
    lines = []
    if summary.get("preempted_at") is not None or summary.get("stopped_by") == "SIGTERM":
        lines.append(
            Line(
                "summary.json",
                0,
                f"stopped_by: {summary.get('stopped_by')}, "
                f"preempted_at: {summary.get('preempted_at')}",
            )
        )
    for event in ev.events:
        text = f"{event.get('reason', '')}: {event.get('message', '')}"
        if PREEMPTED.search(text):
            lines.append(Line("events.yaml", 0, text[:300]))
    if ev.exit_code == 143 and not ev.failures:
        lines.append(Line("exit_code", 1, "143 (SIGTERM)"))
    if not lines:
        return []
    return [
        Finding(
            "preemption",
            "restart",
            0.9,
            "the run was preempted (SIGTERM: a spot or "
            "priority preemption); relaunch from the newest checkpoint",
            [],
            lines[:MAX_EVIDENCE],
        )
    ]


def hang(ev: Evidence) -> list[Finding]:
    """The first failure is a collective timeout: the ranks the flight recorder shows
    behind (never entered the latest collective, and did not fail) are the culprits."""
    first = ordered_failures(ev)
    if not first or not TIMEOUT.search(text_of(first[0])):
        watchdog = lines_matching(ev, TIMEOUT)
        if not watchdog:
            return []
    failed = set(ev.failures)
    behind, lines = set(), [failure_line(f, TIMEOUT) for f in first if TIMEOUT.search(text_of(f))]
    for group in (ev.flight or {}).get("groups", []):
        late = [r for r in group.get("never_entered", []) if r not in failed]
        if late:
            behind.update(late)
            latest = group.get("latest", {})
            lines.append(
                Line(
                    "flight-recorder/analysis.txt",
                    0,
                    f"group {group.get('group')}: latest collective #{latest.get('seq')} "
                    f"{latest.get('op')}: entered by {group.get('entered_latest')}, "
                    f"never entered by {group.get('never_entered')}",
                )
            )
        if group.get("mismatches"):
            m = group["mismatches"][0]
            return [
                Finding(
                    "user_code",
                    "fix_code",
                    0.8,
                    f"ranks called different collectives at #{m['seq']} (the program "
                    "is out of step across ranks)",
                    [],
                    [Line("flight-recorder/analysis.txt", 0, str(m)[:300])],
                )
            ]
    lines += lines_matching(ev, TIMEOUT, 3)
    if not behind:
        return [
            Finding(
                "hang",
                "restart",
                0.6,
                "a collective timed out and no rank was behind (a stalled link or peer); relaunch",
                [],
                lines[:MAX_EVIDENCE],
            )
        ]
    culprits = [ev.where(r) for r in sorted(behind)]
    nodes = {c["node"] for c in culprits if c["node"]}
    others = ev.nodes() - nodes
    decision = "restart_excluding" if nodes and others else "restart"
    change = (
        {"avoid_nodes": sorted(nodes), "warden_check": sorted(nodes)}
        if decision == "restart_excluding"
        else {}
    )
    return [
        Finding(
            "hang",
            decision,
            0.85,
            f"rank {', '.join(map(str, sorted(behind)))} stopped: the others waited in a "
            "collective it never entered until it timed out",
            culprits,
            lines[:MAX_EVIDENCE],
            change,
        )
    ]
