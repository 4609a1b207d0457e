"""Rules of the code and the network, a finished run, and the driver's exit code."""

from __future__ import annotations

import math

from runner.diagnose import tracebacks
from runner.diagnose.evidence import Evidence
from runner.diagnose.finding import (
    MAX_EVIDENCE,
    Finding,
    failure_line,
    lines_matching,
    lookup,
    ordered_failures,
    text_of,
)
from runner.diagnose.patterns import DEAD, LINK_LOCAL, NCCL, TIMEOUT
from runner.diagnose.scan import Line


def network(ev: Evidence) -> list[Finding]:
    texts = [(f, text_of(f)) for f in ordered_failures(ev)]
    lines = [failure_line(f, NCCL) for f, t in texts if NCCL.search(t)]
    lines += lines_matching(ev, NCCL)
    if not lines:
        return []
    local = [x for x in ev.lines if LINK_LOCAL.search(x.text)]
    nodes = {x.node or ev.where(x.rank)["node"] for x in local if x.rank is not None or x.node}
    nodes.discard("")
    if nodes and ev.nodes() - nodes:
        culprits = [ev.where(r) for n in sorted(nodes) for r in ev.ranks_on(n)]
        return [
            Finding(
                "network",
                "restart_excluding",
                0.8,
                f"the network link of node {', '.join(sorted(nodes))} failed (NCCL)",
                culprits,
                (local + lines)[:MAX_EVIDENCE],
                {"avoid_nodes": sorted(nodes), "warden_check": sorted(nodes)},
            )
        ]
    return [
        Finding(
            "network",
            "restart",
            0.65,
            "NCCL or the transport failed between ranks; relaunch",
            [],
            lines[:MAX_EVIDENCE],
        )
    ]


def code(ev: Evidence) -> list[Finding]:
    """The first failure's traceback: through the user's code -> fix_code (the frame and
    line); only the platform's own code -> platform (stop: a bug to report)."""
    for f in ordered_failures(ev):
        tb = tracebacks.parse(f.traceback)
        if tb is None or TIMEOUT.search(text_of(f)) or DEAD.search(text_of(f)):
            continue
        frame = tb.user_frame()
        if frame is not None:
            line = Line(
                f.source or f"rank-{f.rank}.txt",
                0,
                f"{frame.where()}: {frame.code}",
                f.rank,
                f.pod,
                f.node,
            )
            return [
                Finding(
                    "user_code",
                    "fix_code",
                    0.85,
                    f"{tb.headline()} raised in the user's code at {frame.where()}",
                    [ev.where(f.rank)],
                    [failure_line(f), line],
                    {
                        "code": {
                            "file": frame.file,
                            "line": frame.line,
                            "function": frame.function,
                            "error": tb.headline(),
                        }
                    },
                )
            ]
        where = tb.platform_frame()
        if where is not None and not NCCL.search(text_of(f)):
            return [
                Finding(
                    "platform",
                    "stop",
                    0.7,
                    f"{tb.headline()} raised in the platform's code at {where.where()} "
                    "(a bug of the platform: report it with the bundle)",
                    [ev.where(f.rank)],
                    [failure_line(f)],
                )
            ]
        return []
    return []


def no_failure(ev: Evidence) -> list[Finding]:
    """A run that trained every step it was asked for, stopped by nothing, with a finite
    loss: nothing to do, whatever failures it survived (they are listed as `also`)."""
    if ev.bundle is not None or ev.summary is None or ev.summary.get("stopped_by"):
        return []
    final, steps = ev.summary.get("final_loss"), ev.summary.get("steps")
    if isinstance(final, int | float) and not math.isfinite(final):
        return []
    wanted = lookup(ev.config, "train.steps")
    if isinstance(wanted, int) and isinstance(steps, int) and steps < wanted:
        return []
    return [
        Finding(
            "unknown",
            "no_failure",
            0.9,
            "the run ended without a failure",
            [],
            [Line("summary.json", 0, f"final_loss: {final}, steps: {ev.summary.get('steps')}")],
        )
    ]


def exit_codes(ev: Evidence) -> list[Finding]:
    """What the driver's exit code says when nothing else did: 2 (catalog.exitcodes.USAGE)
    the driver refused its config; 3 a torchft run below ft.min_replicas; 137 a SIGKILL;
    143 a SIGTERM (the other codes say only that the run failed)."""
    from catalog import exitcodes

    code = ev.exit_code
    meaning = {
        exitcodes.USAGE: ("config", "fix_config", "the driver refused its config (exit 2)"),
        FT_STOPPED: ("killed", "restart", "a torchft run fell below ft.min_replicas (exit 3)"),
        137: ("killed", "restart", "the driver was killed (exit 137: SIGKILL)"),
        143: ("preemption", "restart", "the driver was stopped (exit 143: SIGTERM)"),
    }.get(code)
    if meaning is None:
        return []
    category, decision, why = meaning
    line = Line("exit_code", 1, str(code))
    return [Finding(category, decision, 0.5, why, [], [line])]


FT_STOPPED = 3  # driver.ft.stop.STOPPED_EXIT: the driver's own code (not a runner exit code)
