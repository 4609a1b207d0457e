"""Rules of the nodes and the machine: hardware faults, out of memory, storage."""

from __future__ import annotations

from catalog.xid import XIDS, node_fault
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
from runner.diagnose.patterns import CUDA_OOM, DISK_FULL, HOST_OOM, STORAGE_BUSY, STORAGE_DENIED
from runner.diagnose.scan import Line


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
