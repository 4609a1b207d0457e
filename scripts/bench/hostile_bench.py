"""Hostile peers against every serving loop of the driver, 1,000 cases each, and the figures.

    python scripts/bench/hostile_bench.py                      # 1,000 cases per loop (~5 min)
    python scripts/bench/hostile_bench.py --cases 200 --loops proxy,channel

Loops: the auxiliary proxy, an auxiliary worker faced directly, the run's channel, the
DiLoCo synchronizer (learners on the allow-list that misbehave, and strangers) and a DiLoCo
learner's link (a synchronizer that misbehaves). Each runs in a process of its own
(tests/hostile/targets.py); `--peers` peers send the cases in turn (tests/hostile: deep
nesting, huge and split frames, many frames, garbage, truncated and non-finite values, NaN
deadlines, wrong kinds, tokens and keys, replays, floods, slow senders, shared-memory and
dtype tricks; for DiLoCo, NaN, infinite, out-of-range and int8 updates, a learner speaking
as another), and a legitimate call every 50 cases must succeed. Kinds that move about a
whole message limit (split and huge frames) are sent at most 8 times per loop; the limit
is `--limit` (64 MiB, the default of the auxiliary services and the run's channel).

Printed per loop: cases and kinds, serving threads lost (goal 0), legitimate calls that
failed (goal 0), loop restarts, the serving process's memory growth per peer from after
the warm-up to after the suite (goal <= 64 MiB) and its peak, per peer and in all (what
ZeroMQ held of a message while it arrived: it passes a multipart message on only once all
of it is in, so an unauthenticated peer's split message is held whole until the receiver
lets it go), refusals by reason; then the ratio of each growth to the 64 MiB bound.
"""

from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

BOUND_MIB = 64.0
LOOPS = ("proxy", "worker", "channel", "synchronizer", "learner")


def summary(reports: list) -> list[str]:
    """The closing lines: totals and each loop's growth ÷ the bound."""
    lost = sum(r.threads_lost for r in reports)
    failed = sum(r.failed_checks for r in reports)
    lines = [f"serving threads lost {lost} [goal 0], legitimate calls failed {failed} [goal 0]"]
    for r in reports:
        ratio = r.growth_per_peer_mib / BOUND_MIB
        lines.append(
            f"ratio {r.loop:<12} memory growth per peer ÷ {BOUND_MIB:g} MiB  {ratio:.3f} "
            f"[goal <= 1]  (peak ÷ bound {r.peak_per_peer_mib / BOUND_MIB:.3f})"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    from tests.hostile.suites import run

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=1000, help="cases per loop")
    parser.add_argument(
        "--loops", default=",".join(LOOPS), help="comma-separated, of " + ",".join(LOOPS)
    )
    parser.add_argument("--limit", type=int, default=64 << 20, help="message limit, bytes")
    parser.add_argument("--peers", type=int, default=8, help="hostile peers per loop")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    loops = [loop for loop in args.loops.split(",") if loop]
    unknown = sorted(set(loops) - set(LOOPS))
    if unknown:
        print(f"error: --loops {','.join(unknown)}: expected some of {','.join(LOOPS)}")
        return 2
    load = os.getloadavg()
    print(f"host: {os.cpu_count()} CPUs, load average {load[0]:.1f} / {load[1]:.1f}")
    reports = []
    for loop in loops:
        report = run(loop, args.cases, args.limit, args.seed, args.peers)
        reports.append(report)
        print(report.line(), flush=True)
        print(f"  refused: {report.refused}", flush=True)
    for line in summary(reports):
        print(line)
    return 0 if all(r.threads_lost == r.failed_checks == 0 for r in reports) else 1


if __name__ == "__main__":
    raise SystemExit(main())
