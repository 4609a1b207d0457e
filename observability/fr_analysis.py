"""What flight recorder dumps of all ranks say about a hang or a crash (pure functions).

    report = analyse({0: dump0, 1: dump1, ...})     # dumps as flight_recorder.load gives them
    print("\\n".join(lines(report)))

Per process group (collectives only; point-to-point entries are left out): each rank's last
collective (sequence number, op, sizes, state), the group's latest collective and the ranks
that never entered it (a rank without a dump counts), and the sequence numbers at which
ranks recorded different ops or input sizes (a desynchronized program).
"""

from __future__ import annotations

import json

MAX_MISMATCHES = 5


def seq(entry: dict) -> int:
    return int(entry["collective_seq_id"])


def signature(entry: dict) -> str:
    return f"{entry.get('profiling_name', '?')} {entry.get('input_sizes', [])}"


def members(name: str, desc: str, dumps: dict[int, dict], seen: set[int]) -> list[int]:
    """The group's global ranks from any dump's pg_config (the default group may be listed
    under "" by some backends), else the ranks seen in it."""
    for dump in dumps.values():
        config = dump.get("pg_config", {})
        info = config.get(name) or (config.get("") if desc == "default_pg" else None)
        if info and info.get("ranks"):
            try:
                return sorted(int(r) for r in json.loads(info["ranks"]))
            except (TypeError, ValueError):
                continue
    return sorted(seen)


def by_group(dumps: dict[int, dict]) -> dict[tuple[str, str], dict[int, list[dict]]]:
    groups: dict[tuple[str, str], dict[int, list[dict]]] = {}
    for rank, dump in sorted(dumps.items()):
        for entry in dump.get("entries", []):
            if entry.get("is_p2p"):
                continue
            name, desc = (list(entry.get("process_group", ["", ""])) + ["", ""])[:2]
            groups.setdefault((str(name), str(desc)), {}).setdefault(rank, []).append(entry)
    return groups


def mismatches(entries: dict[int, list[dict]]) -> list[dict]:
    """Sequence numbers at which ranks recorded different collectives (latest first)."""
    at: dict[int, dict[int, str]] = {}
    for rank, items in entries.items():
        for entry in items:
            at.setdefault(seq(entry), {})[rank] = signature(entry)
    found = [
        {"seq": s, "by_rank": {str(r): sig for r, sig in sorted(ranks.items())}}
        for s, ranks in sorted(at.items(), reverse=True)
        if len(set(ranks.values())) > 1
    ]
    return found[:MAX_MISMATCHES]


def group_report(name: str, desc: str, entries: dict[int, list[dict]], dumps) -> dict:
    last = {rank: max(items, key=seq) for rank, items in entries.items()}
    latest = max(seq(e) for e in last.values())
    head = next(e for e in last.values() if seq(e) == latest)
    ranks = members(name, desc, dumps, set(entries))
    return {
        "group": name,
        "desc": desc,
        "ranks": ranks,
        "latest": {"seq": latest, "op": signature(head)},
        "entered_latest": sorted(r for r, e in last.items() if seq(e) == latest),
        "never_entered": sorted(r for r in ranks if r not in last or seq(last[r]) < latest),
        "no_dump": sorted(r for r in ranks if r not in dumps),
        "last_per_rank": {
            str(r): {"seq": seq(e), "op": signature(e), "state": e.get("state", "?")}
            for r, e in sorted(last.items())
        },
        "mismatches": mismatches(entries),
    }


def analyse(dumps: dict[int, dict]) -> dict:
    """The report of all ranks' dumps (see the module docstring)."""
    groups = [group_report(n, d, entries, dumps) for (n, d), entries in by_group(dumps).items()]
    return {"ranks": sorted(dumps), "groups": groups}


def lines(report: dict) -> list[str]:
    """The report as a few lines of text (crash bundle's flight-recorder/analysis.txt)."""
    out = [f"flight recorder dumps of ranks {report['ranks']}"]
    for g in report["groups"]:
        latest = g["latest"]
        out.append(f"group {g['group']} ({g['desc'] or '-'}), ranks {g['ranks']}:")
        out.append(f"  latest collective #{latest['seq']} {latest['op']}: entered by "
                   f"{g['entered_latest']}, never entered by {g['never_entered']}")  # fmt: skip
        if g["no_dump"]:
            out.append(f"  no dump from ranks {g['no_dump']}")
        for rank, last in g["last_per_rank"].items():
            out.append(f"  rank {rank}: last #{last['seq']} {last['op']} ({last['state']})")
        for m in g["mismatches"]:
            ops = "; ".join(f"rank {r}: {sig}" for r, sig in m["by_rank"].items())
            out.append(f"  mismatch at #{m['seq']}: {ops}")
    return out
