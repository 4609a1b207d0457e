"""The deterministic rules: each reads the Evidence and says what it finds, with the lines.

Every rule returns `Finding`s (a category, a decision, the culprits, the evidence lines, a
confidence, a proposed change) and `decide` keeps the one with the highest priority: the
root cause before its consequences (a GPU that fell off the bus makes NCCL time out and
every rank fail; an OOM kill looks like a killed process). A rank's failures are taken in
time order: the first one is the cause, later ones followed from it.

| rule | category | decision |
| --- | --- | --- |
| an Xid of a node bucket (catalog/xid.py), NVLink, Warden's fault | hardware | restart_excluding |
| CUDA out of memory, the kernel's OOM killer on a rank | oom | fix_config |
| a full disk; storage refusing (403) | storage | stop |
| storage busy (429, 503) | storage | restart |
| non-finite loss in the metrics | numerics | fix_config |
| `debug.fail_at_step`, a config the driver refused | config | fix_config |
| a traceback through the user's code | user_code | fix_code |
| ranks out of step (flight recorder mismatch) | user_code | fix_code |
| a collective timeout; the flight recorder's ranks behind | hang | restart_excluding, restart |
| NCCL and transport errors | network | restart_excluding, restart |
| a preemption notice (SIGTERM), spot reclaim | preemption | restart |
| a process killed, a service worker dead, ft below its minimum | killed | restart |
| a traceback in the platform's own code only | platform | stop |
| a finished run with a finite loss | - | no_failure |
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from catalog.xid import XIDS, node_fault
from runner.diagnose import tracebacks
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

TIMEOUT = re.compile(
    r"Watchdog caught collective operation timeout|[Tt]imed out waiting \d+ ?ms|"
    r"collective operation timeout|NCCL timeout|DistBackendError.*[Tt]imeout|"
    r"ran for \d+ milliseconds before timing out"
)
NCCL = re.compile(
    r"ncclRemoteError|ncclSystemError|ncclInternalError|ncclUnhandledCudaError|"
    r"NCCL WARN|NET/IB ?:|NET/Socket|transport/net|Connection reset by peer|"
    r"Connection closed by peer|port state.*(?:DOWN|down)|IB link down"
)
LINK_LOCAL = re.compile(
    r"NET/IB ?: .*(?:port|link).*(?:down|DOWN|error)|ibv_poll_cq|"
    r"mlx5_\d+:\d+ .*(?:down|error)|IB link down",
    re.IGNORECASE,
)
CUDA_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED")
HOST_OOM = re.compile(r"(?:Memory cgroup out of memory|Out of memory): Killed process (\d+)")
DISK_FULL = re.compile(r"No space left on device|ENOSPC|Errno 28|Disk quota exceeded|EDQUOT")
STORAGE_DENIED = re.compile(
    r"\b403\b.*(?:Forbidden|storage|bucket|gs://)|AccessDenied|"
    r"does not have storage\.objects\.\w+ access",
    re.IGNORECASE,
)
STORAGE_BUSY = re.compile(
    r"\b(?:429|503)\b.*(?:gs://|storage|bucket)|TooManyRequests|"
    r"SlowDown|Service Unavailable.*(?:gs://|storage)"
)
NONFINITE = re.compile(r"loss (?:is )?(?:nan|inf)|non-finite loss|nan loss", re.IGNORECASE)
INJECTED = re.compile(r"debug\.fail_at_step=(\d+): injected failure")
CONFIG_ERROR = re.compile(r"^\S+\.ya?ml: [\w.]+: |ConfigCompositionException|ValidationError")
KILLED = re.compile(
    r"ActorDiedError|The actor died unexpectedly|Worker exits? unexpectedly|"
    r"SIGKILL|killed by signal 9|exit code -9|exit code 137|worker died|"
    r"RayActorError|was killed|The actor is dead|connection to the .* lost|"
    r"ProcessGroup.*(?:aborted|terminated)|below ft\.min_replicas|"
    r"AuxUnavailable|aux service .* (?:died|unavailable)",
    re.IGNORECASE,
)
PREEMPTED = re.compile(r"preempt|SIGTERM|spot.*(?:reclaim|termination)|NodeShutdown", re.IGNORECASE)


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


def hardware(ev: Evidence) -> list[Finding]:
    from runner.preflight.kernel import parse_line

    out = []
    for node, lines in sorted(ev.kernel.items()):
        bad = []
        for line in lines:
            finding = parse_line(line.text)
            if finding is None or finding.category in ("oom", "hung-task"):
                continue
            fatal = (
                node_fault(finding.code)
                if finding.category.startswith("xid") and finding.code is not None
                else finding.severity == "FAIL"
            )
            if finding.category == "sxid" or finding.code not in XIDS:
                fatal = finding.severity == "FAIL"
            bad.append((fatal, finding, line))
        node_bad = [b for b in bad if b[0]]
        if node_bad:
            culprits = [ev.where(r) for r in ev.ranks_on(node)] or [
                {"rank": None, "pod": "", "node": node}
            ]
            what = "; ".join(sorted({b[1].message for b in node_bad}))[:200]
            out.append(
                Finding(
                    "hardware",
                    "restart_excluding",
                    0.95,
                    f"node {node}: {what}",
                    culprits,
                    [b[2] for b in node_bad][:MAX_EVIDENCE],
                    {"avoid_nodes": [node], "warden_check": [node]},
                )
            )
        elif bad and any(b[1].code == 94 for b in bad):
            lines94 = [b[2] for b in bad if b[1].code == 94]
            out.append(
                Finding(
                    "hardware",
                    "restart",
                    0.7,
                    f"node {node}: contained ECC error (Xid 94): the GPU retired the "
                    "page; restart the application",
                    [ev.where(r) for r in ev.ranks_on(node)],
                    lines94,
                )
            )
    for node, events in sorted(ev.warden.items()):
        definite = [
            e
            for e in events
            if e.get("severity") in ("error", "critical") or e.get("kind") in ("cordon", "escalate")
        ]
        if definite:
            line = Line(
                "warden.json",
                0,
                f"{node}: {definite[0].get('kind')}: {definite[0].get('reason', '')}",
                node=node,
            )
            out.append(
                Finding(
                    "hardware",
                    "restart_excluding",
                    0.85,
                    f"Warden found node {node} faulty",
                    [ev.where(r) for r in ev.ranks_on(node)]
                    or [{"rank": None, "pod": "", "node": node}],
                    [line],
                    {"avoid_nodes": [node], "warden_check": [node]},
                )
            )
    return merge_nodes(out)


def merge_nodes(found: list[Finding]) -> list[Finding]:
    """One restart_excluding finding naming every faulty node."""
    excluding = [f for f in found if f.decision == "restart_excluding"]
    if len(excluding) <= 1:
        return found
    first = excluding[0]
    for other in excluding[1:]:
        first.culprits += [c for c in other.culprits if c not in first.culprits]
        first.evidence += other.evidence
        for key in ("avoid_nodes", "warden_check"):
            first.change[key] = sorted(set(first.change.get(key, [])) | set(other.change[key]))
        first.why += f"; {other.why}"
    first.evidence = first.evidence[:MAX_EVIDENCE]
    return [first] + [f for f in found if f.decision != "restart_excluding"]


def oom(ev: Evidence) -> list[Finding]:
    out = []
    mb = lookup(ev.config, "train.micro_batch_size")
    change = (
        {"set": {"train.micro_batch_size": max(1, int(mb) // 2)}} if isinstance(mb, int) else {}
    )
    for f in ordered_failures(ev):
        if CUDA_OOM.search(text_of(f)):
            out.append(
                Finding(
                    "oom",
                    "fix_config",
                    0.9,
                    f"rank {f.rank} ran out of GPU memory; halve the micro-batch",
                    [ev.where(f.rank)],
                    [failure_line(f, CUDA_OOM)],
                    change,
                )
            )
            break
    pids = {f.pid: f.rank for f in ev.failures.values() if f.pid}
    for node, lines in sorted(ev.kernel.items()):
        for line in lines:
            m = HOST_OOM.search(line.text)
            if not m:
                continue
            rank = pids.get(int(m[1]))
            culprits = (
                [ev.where(rank)] if rank is not None else [ev.where(r) for r in ev.ranks_on(node)]
            )
            out.append(
                Finding(
                    "oom",
                    "fix_config",
                    0.9 if rank is not None else 0.75,
                    f"the kernel's OOM killer ended process {m[1]} on node {node}"
                    + (f" (rank {rank})" if rank is not None else "")
                    + "; halve the micro-batch or give the pods more memory",
                    culprits,
                    [line],
                    change,
                )
            )
            return out
    for pod in ev.pods:
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            term = (
                (status.get("lastState") or {}).get("terminated")
                or (status.get("state") or {}).get("terminated")
                or {}
            )
            if term.get("reason") == "OOMKilled":
                name = (pod.get("metadata") or {}).get("name", "")
                node = (pod.get("spec") or {}).get("nodeName", "")
                line = Line(
                    "pods.yaml", 0, f"{name}/{status.get('name')}: OOMKilled", pod=name, node=node
                )
                culprits = [ev.where(r) for r, m in ev.members.items() if m.get("pod") == name]
                out.append(
                    Finding(
                        "oom",
                        "fix_config",
                        0.85,
                        f"pod {name} was OOMKilled",
                        culprits or [{"rank": None, "pod": name, "node": node}],
                        [line],
                        change,
                    )
                )
                return out
    return out


def storage(ev: Evidence) -> list[Finding]:
    texts = [(f, text_of(f)) for f in ordered_failures(ev)]
    for pattern, decision, why in (
        (
            DISK_FULL,
            "stop",
            "the disk is full: free space or raise "
            "the quota, then relaunch (retrying fails the same way)",
        ),
        (
            STORAGE_DENIED,
            "stop",
            "storage refused the run's writes: fix the bucket's permissions, then relaunch",
        ),
        (STORAGE_BUSY, "restart", "storage was busy (throttled); a relaunch resumes"),
    ):
        lines = [failure_line(f, pattern) for f, t in texts if pattern.search(t)]
        lines += lines_matching(ev, pattern)
        lines += [x for x in ev.driver_lines if pattern.search(x.text)]
        if lines:
            return [Finding("storage", decision, 0.85, why, [], lines[:MAX_EVIDENCE])]
    return []


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


def lookup(data: dict, dotted: str):
    for key in dotted.split("."):
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


DEAD = re.compile(
    r"actor died unexpectedly|worker process has died|Worker unexpectedly exits|"
    r"killed by signal 9|SIGKILL|exit code 137|ActorDiedError",
    re.IGNORECASE,
)


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


def first_match(text: str, pattern: re.Pattern, source: str) -> Line:
    for number, line in enumerate(text.splitlines(), 1):
        if pattern.search(line):
            return Line(source, number, line.strip())
    return Line(source, 0, text.strip().splitlines()[0] if text.strip() else "")


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


RULES = (
    hardware,
    oom,
    storage,
    numerics,
    config,
    code,
    killed,
    hang,
    network,
    preemption,
    no_failure,
)
