"""Failure analysis and run logs: accuracy over the corpus, time to verdict at scale, log
ingestion and the lines around a failure.

    .venv/bin/python scripts/bench/diagnose_bench.py [--ranks 1000] [--log-gb 1.0]
                                                     [--ingest-lines 1000000] [--skip-big]

1. **Decision accuracy, rules alone**, over tests/fixtures/failures/ (every case's expected
   decision and category), overall and per kind (crash-type, hang-type, none), against the
   peer policy large models fall back on ("restart" for every failure) [goal >= 0.95].
2. **Culprit top-1** where the case has a culprit: the verdict's first culprit is one of the
   labelled ranks or nodes, against the peer "blame the first rank whose record says
   something" [goal >= 0.9].
3. **Time to verdict** on a synthetic crash bundle of `--ranks` ranks (8 per node) with
   `--log-gb` of log files (every rank's lines; rank 517 hung, its node's NIC logged errors,
   every other rank timed out in the all-reduce), rules alone, against reading the same
   files once (the I/O floor) [goal <= 10 s]. The verdict must name the hung rank.
4. **Log ingestion**: `--ingest-lines` lines with the label set, in 64 ranks' log files, into
   a run's chDB store (observability.logs.Ingest: the files' lines are the rows), against
   inserting the same rows as Python dicts (observability.store.LocalStore.insert)
   [goal >= 100,000 lines/s]; then one rank's lines around a failure
   (observability.log_search.around) against scanning that rank's file [goal <= 1 s].

Loading and generating are not timed; wall and CPU time (this process's and its children's:
the analysis runs grep) of each measured step are printed with the load average (the
machine may be shared).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from runner.diagnose.analyze import analyze  # noqa: E402

CORPUS = ROOT / "tests" / "fixtures" / "failures"
GOALS = {
    "accuracy": 0.95,
    "culprit": 0.9,
    "verdict_s": 10.0,
    "ingest_lps": 100_000,
    "around_s": 1.0,
}
HUNG = 517
T0 = time.time() - 3600


def cpu() -> float:
    """CPU seconds of this process and its finished children (grep)."""
    usages = (resource.getrusage(resource.RUSAGE_SELF),
              resource.getrusage(resource.RUSAGE_CHILDREN))  # fmt: skip
    return sum(u.ru_utime + u.ru_stime for u in usages)


def timed(fn, *args):
    wall, used = time.perf_counter(), cpu()
    out = fn(*args)
    return out, time.perf_counter() - wall, cpu() - used


def corpus() -> list[tuple[str, dict]]:
    return [
        (p.name, yaml.safe_load((p / "expected.yaml").read_text()))
        for p in sorted(CORPUS.iterdir())
        if (p / "expected.yaml").exists()
    ]


def accuracy() -> dict:
    """Decision accuracy and culprit top-1, rules and peers."""
    per_kind: dict[str, list[int]] = {}
    rules_ok = peer_ok = top1 = peer_top1 = with_culprit = 0
    for name, want in corpus():
        v = analyze(CORPUS / name)
        good = (v.decision, v.category) == (want["decision"], want["category"])
        rules_ok += good
        peer = "restart" if want["kind"] != "none" else "no_failure"
        peer_ok += peer == want["decision"]
        per_kind.setdefault(want["kind"], []).append(int(good))
        ranks, nodes = set(want["culprits"]["ranks"]), set(want["culprits"]["nodes"])
        if ranks or nodes:
            with_culprit += 1
            first = v.culprits[0] if v.culprits else {}
            top1 += first.get("rank") in ranks or first.get("node") in nodes
            peer_top1 += first_speaker(CORPUS / name) in ranks
        if not good:
            print(
                f"  miss: {name}: {v.decision}/{v.category}, want {want['decision']}/"
                f"{want['category']}"
            )
    n = sum(len(v) for v in per_kind.values())
    return {
        "cases": n,
        "rules": rules_ok / n,
        "peer": peer_ok / n,
        "kinds": {k: (sum(v) / len(v), len(v)) for k, v in sorted(per_kind.items())},
        "top1": top1 / with_culprit,
        "peer_top1": peer_top1 / with_culprit,
        "with_culprit": with_culprit,
    }


def first_speaker(case: Path) -> int | None:
    """The peer's culprit: the first rank (in time) with a failure record."""
    from runner.diagnose import evidence

    ev = evidence.load(case)
    ordered = sorted(ev.failures.values(), key=lambda f: (f.time is None, f.time or 0, f.rank))
    return ordered[0].rank if ordered else None


def big_bundle(folder: Path, ranks: int, log_bytes: int) -> Path:
    """A crash bundle of `ranks` ranks with `log_bytes` of log files (see the docstring)."""
    out = folder / "run"
    bundle = out / "crash-20261201-101500"
    (bundle / "logs").mkdir(parents=True)
    node = lambda r: f"gke-a3u-pool-{r // 8:04d}"  # noqa: E731
    members = {str(r): {"pod": f"w-{r // 8}", "node": node(r), "attempt": 0} for r in range(ranks)}
    timeout = (
        "RuntimeError: [Rank {r}] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=4411, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, "
        "Timeout(ms)=600000) ran for 600103 milliseconds before timing out."
    )
    failed = {
        str(r): {**members[str(r)], "error": timeout.format(r=r), "time": T0 + 700 + r / 1e3}
        for r in range(ranks)
        if r != HUNG
    }
    (bundle / "ranks.json").write_text(json.dumps({"failed": failed, "members": members}))
    for r in failed:
        (bundle / f"rank-{r}.txt").write_text(
            f"rank {r} on w-{int(r) // 8} pid {1000 + int(r)}\n\nTraceback (most recent call "
            f'last):\n  File "/opt/platform/driver/step.py", line 61, in step\n    loss.backward()'
            f"\n{failed[r]['error']}\n\nlast log lines:\n(none)\n"
        )
    group = {
        "group": "0",
        "desc": "default_pg",
        "ranks": list(range(ranks)),
        "latest": {"seq": 4411, "op": "nccl:all_reduce [[1048576]]"},
        "entered_latest": [r for r in range(ranks) if r != HUNG],
        "never_entered": [HUNG],
        "no_dump": [HUNG],
        "last_per_rank": {},
        "mismatches": [],
    }
    summary = {
        "time": "20261201-101500",
        "error": "WorkerGroupError",
        "failed_ranks": sorted(int(r) for r in failed),
        "flight_recorder": {"ranks": sorted(int(r) for r in failed), "groups": [group]},
    }
    (bundle / "summary.json").write_text(json.dumps(summary))
    (bundle / "config.yaml").write_text("run:\n  name: big\n  team: bench\n")
    write_logs(out / "logs", ranks, log_bytes, node)
    return out


def write_logs(folder: Path, ranks: int, log_bytes: int, node) -> None:
    folder.mkdir(parents=True)
    per_rank = max(1, log_bytes // ranks)
    for r in range(ranks):
        head = (
            f'{{"cluster":"bench","team":"bench","run":"big","learner":"","attempt":0,'
            f'"rank":{r},"pod":"w-{r // 8}","node":"{node(r)}","worker":"",'
            f'"service":"train","source":"logging","logger":"driver.worker",'
        )
        lines, size, step = [], 0, 0
        while size < per_rank:
            line = (
                f'{head}"level":"INFO","ts":{T0 + step * 0.1:.6f},"line":"step {step} loss '
                f'{3.0 - step * 1e-4:.4f} lr 3.0e-04 tokens/s 181234 data_wait_s 0.0012"}}\n'
            )
            lines.append(line)
            size += len(line)
            step += 1
        if r // 8 == HUNG // 8:  # the hung rank's node: its NIC's errors
            lines.insert(
                len(lines) // 2,
                f'{head}"level":"WARNING","ts":{T0 + 650:.6f},"line":'
                '"NCCL WARN NET/IB : mlx5_2:1 port state changed to DOWN"}\n',
            )
        (folder / f"train-rank-{r}.jsonl").write_text("".join(lines))


def read_all(folder: Path) -> int:
    total = 0
    for path in folder.rglob("*.jsonl"):
        with path.open("rb") as f:
            while block := f.read(16 << 20):
                total += len(block)
    return total


def ingest_bench(folder: Path, lines: int) -> dict:
    """Lines/s of Ingest and of dict inserts, and the time of one rank's lines around a
    failure, in a fresh store (this process is its one writer)."""
    from observability import log_search, logs, store

    logs_dir = folder / "ingest" / "logs"
    write_logs(logs_dir, 64, lines * 200, lambda r: f"node-{r // 8}")
    count = sum(1 for p in logs_dir.glob("*.jsonl") for _ in p.open("rb"))
    rows_of_one = [
        json.loads(x) for x in (logs_dir / "train-rank-0.jsonl").read_text().splitlines()
    ]
    with store.LocalStore.open(folder / "ingest") as s:
        done, wall, used = timed(logs.Ingest(logs_dir, s).poll)
        rows = rows_of_one * max(1, count // len(rows_of_one) // 4)
        peer = [{**r, "run": "peer"} for r in rows]
        _, pwall, pused = timed(s.insert, logs.RUN_LOGS, peer)
        ts = T0 + 0.1 * len(rows_of_one) / 2
        around, awall, aused = timed(log_search.around, s.query, "bench", "big", 37, ts)
        scan, swall, _ = timed(scan_file, logs_dir / "train-rank-37.jsonl", ts)
    assert len(around) == len(scan), (len(around), len(scan))
    return {
        "lines": done,
        "wall": wall,
        "cpu": used,
        "lps": done / wall,
        "peer_lines": len(peer),
        "peer_lps": len(peer) / pwall,
        "peer_cpu": pused,
        "around": len(around),
        "around_s": awall,
        "around_cpu": aused,
        "scan_s": swall,
    }


def scan_file(path: Path, ts: float, before: float = 60.0, after: float = 10.0) -> list[dict]:
    """The peer of `around`: every line of the rank's file, parsed, filtered by time."""
    rows = (json.loads(x) for x in path.open())
    return [r for r in rows if ts - before <= r["ts"] <= ts + after][-500:]


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=1000)
    p.add_argument("--log-gb", type=float, default=1.0)
    p.add_argument("--ingest-lines", type=int, default=1_000_000)
    p.add_argument("--skip-big", action="store_true", help="only the corpus figures")
    args = p.parse_args(argv)
    print(f"load average before: {load()}")
    a = accuracy()
    print(
        f"decision accuracy, rules alone, {a['cases']} cases: {a['rules']:.3f} "
        f"[goal >= {GOALS['accuracy']}]; peer 'always restart': {a['peer']:.3f}; "
        f"ratio {a['rules'] / max(a['peer'], 1e-9):.2f}"
    )
    for kind, (value, n) in a["kinds"].items():
        print(f"  {kind}-type ({n} cases): {value:.3f}")
    print(
        f"culprit top-1 ({a['with_culprit']} cases with a culprit): {a['top1']:.3f} "
        f"[goal >= {GOALS['culprit']}]; peer 'first rank with a record': "
        f"{a['peer_top1']:.3f}"
    )
    if args.skip_big:
        return 0
    with tempfile.TemporaryDirectory(prefix="diagnose-bench-") as scratch:
        folder = Path(scratch)
        started = time.perf_counter()
        run = big_bundle(folder, args.ranks, int(args.log_gb * 1e9))
        size = read_all(run)
        print(
            f"synthetic bundle: {args.ranks} ranks, {size / 1e9:.2f} GB of logs "
            f"(written in {time.perf_counter() - started:.0f} s, not timed)"
        )
        _, read_s, _ = timed(read_all, run)
        v, wall, used = timed(analyze, run)
        named = [c["rank"] for c in v.culprits]
        print(
            f"time to verdict: {wall:.2f} s (CPU {used:.2f} s) [goal <= {GOALS['verdict_s']} s];"
            f" reading the files once: {read_s:.2f} s; ratio {wall / read_s:.2f}; verdict "
            f"{v.decision}/{v.category}, culprits {named}"
        )
        if named[:1] != [HUNG]:
            print(f"error: the verdict does not name rank {HUNG} first", file=sys.stderr)
            return 1
        shutil.rmtree(run)
        i = ingest_bench(folder, args.ingest_lines)
        print(
            f"log ingestion: {i['lines']} lines in {i['wall']:.2f} s (CPU {i['cpu']:.2f} s): "
            f"{i['lps']:,.0f} lines/s [goal >= {GOALS['ingest_lps']:,}]; rows as dicts: "
            f"{i['peer_lps']:,.0f} lines/s; ratio {i['lps'] / i['peer_lps']:.2f}"
        )
        print(
            f"a rank's lines around a failure: {i['around']} lines in {i['around_s']:.3f} s "
            f"[goal <= {GOALS['around_s']} s]; scanning its file: {i['scan_s']:.3f} s; ratio "
            f"{i['around_s'] / i['scan_s']:.2f}"
        )
    print(f"load average after: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
