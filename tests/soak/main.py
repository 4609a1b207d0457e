"""`scripts/soak --minutes N [--seed S] [--fault-every SECONDS] [--out DIR] [--no-baseline]
[--spare KINDS] [--warden] [--diloco]`: the soak's command line, its checks and what it
prints (docs/soak.md). Exit 0 when every check passed, 1 when one failed, 2 for a bad
argument, 130 when interrupted (Ctrl-C or SIGTERM: every process of its runs is ended
first)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from tests.soak import chaos, procs
from tests.soak.launch import Run
from tests.soak.records import check, losses, same_curve
from tests.soak.soak import FD_BOUND, RSS_BOUND, Outcome, Soak


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scripts/soak", description=__doc__)
    parser.add_argument("--minutes", type=float, required=True, help="time under faults")
    parser.add_argument("--seed", type=int, default=None, help="default: from the clock")
    parser.add_argument(
        "--fault-every",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="mean seconds between faults (each uniform in 0.5x..1.5x)",
    )
    parser.add_argument("--out", type=Path, default=None, help="default: a new temp folder")
    parser.add_argument("--no-baseline", action="store_true",
                        help="no failure-free run (no throughput ratio)")  # fmt: skip
    kinds = ", ".join([*chaos.ALL, *chaos.WARDEN])
    parser.add_argument("--spare", default="", metavar="KINDS",
                        help=f"kinds never killed, comma-separated ({kinds})")  # fmt: skip
    parser.add_argument("--warden", action="store_true",
                        help="Warden on a fake fleet beside the run under faults")  # fmt: skip
    parser.add_argument("--diloco", action="store_true",
                        help="then a DiLoCo pair under faults for as long")  # fmt: skip
    args = parser.parse_args(argv)
    if args.minutes <= 0 or args.fault_every <= 0:
        parser.error("--minutes and --fault-every must be positive")
    args.spare = tuple(kind.strip() for kind in args.spare.split(",") if kind.strip())
    unknown = sorted(set(args.spare) - set(chaos.ALL) - set(chaos.WARDEN) - {chaos.SYNCHRONIZER})
    if unknown:
        parser.error(f"--spare: unknown kind {', '.join(unknown)} (kinds: {kinds})")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    seed = args.seed if args.seed is not None else int(time.time()) % 100000
    out = args.out or Path(tempfile.mkdtemp(prefix="soak-"))
    print(f"soak: seed {seed}, {args.minutes:g} min under faults, one every ~{args.fault_every:g}"
          f" s, outputs in {out}", flush=True)  # fmt: skip
    procs.become_subreaper()  # every process of the run stays below the soak
    soak = Soak(seed, args.fault_every, args.spare)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # as Ctrl-C: end the runs too
    try:
        return soak_and_check(soak, args, out)
    except KeyboardInterrupt:
        print(f"soak: interrupted; {soak.end_all()} processes of its runs ended", flush=True)
        return 130


def soak_and_check(soak: Soak, args: argparse.Namespace, out: Path) -> int:
    base, clean = None, Run(out / "baseline", "soak-baseline")
    if not args.no_baseline:
        base = soak.phase([clean], args.minutes, faults=False)
    if args.diloco:
        from tests.soak import pair  # (imports torch: before the soak's own memory is read)
    if args.warden:
        from tests.soak import warden  # (imports Warden's fake fleet: before it too)
    fds, rss = procs.fd_count(), procs.rss_bytes()
    layer = warden.Layer(out / "warden", args.minutes) if args.warden else None
    if layer is not None:
        soak.say(f"warden: {layer.start()}")
    run = Run(out / "faults", "soak")
    faulted = soak.phase([run], args.minutes, faults=True, warden=layer)
    results = [rows(run), resumes(run), runs(faulted, base)]
    if base is not None:
        results.append(curve(run, clean))
    if layer is not None:
        results.append(layer.finish())
    if args.diloco:
        results += diloco(soak, out / "pair", args.minutes, pair)
    results += [*own((fds, rss)), orphans(soak)]
    print("checks:")
    for name, ok, text in results:
        print(f"  {name}: {'PASS' if ok else 'FAIL'} {text}")
    if base is not None:
        print(throughput(faulted, base))
    failed = not all(ok for _, ok, _ in results)
    print(f"soak: {'FAIL' if failed else 'PASS'}", flush=True)
    return 1 if failed else 0


def diloco(soak: Soak, out: Path, minutes: float, pair) -> list[tuple[str, bool, str]]:
    """The DiLoCo pair under faults for `minutes`, and its checks."""
    sync = pair.Sync(out / "sync", ["a", "b"])
    soak.say(f"synchronizer: {sync.start()}")
    learners = pair.learners(out, sync)
    paired = soak.phase(learners, minutes, faults=True, sync=sync)
    found = [*(rows(learner) for learner in learners), *(resumes(learner) for learner in learners)]
    found = [(f"{learner}: {name}", ok, text) for learner, (name, ok, text)
             in zip(["pair a", "pair b"] * 2, found, strict=True)]  # fmt: skip
    name, ok, text = runs(paired, None)
    return [*found, (f"pair {name}", ok, f"{text}; {sync.rounds()} rounds merged")]


def throughput(faulted: Outcome, base: Outcome) -> str:
    ratio = faulted.committed / base.committed if base.committed else 0.0
    return (f"  throughput: {ratio:.2f} of the failure-free run ({faulted.committed} / "
            f"{base.committed} steps committed in {faulted.seconds / 60:g} min)")  # fmt: skip


def rows(run: Run) -> tuple[str, bool, str]:
    segments, torn = run.segments()
    verdict = check(segments)
    again = run.newest_checkpoint()  # where the same command once more would resume
    if again > verdict.committed:  # a checkpoint committed ahead of its rows
        verdict.problems.append(f"the newest checkpoint is step {again} but the rows reached "
                                f"only step {verdict.committed}: rows lost")  # fmt: skip
    text = (f"{verdict.committed} committed steps, each with one row of record "
            f"({len(run.launches)} launches, {verdict.replayed} rows replayed after a resume, "
            f"{torn} torn lines)")  # fmt: skip
    text += "".join(f"\n    {line}" for line in verdict.problems[:10])
    return "rows", not verdict.problems and not torn, text


def curve(run: Run, clean: Run) -> tuple[str, bool, str]:
    """The faulted run's loss at every step against the failure-free run's (records.same_curve:
    with a constant global batch, the faults change only the order of the sums)."""
    faulted, base = (losses(r.metrics.read_bytes()) if r.metrics.exists() else {}
                     for r in (run, clean))  # fmt: skip
    ok, text = same_curve(faulted, base)
    return "loss curve", ok, text


def resumes(run: Run) -> tuple[str, bool, str]:
    wrong = [f"launch {index}: resumed from step {run.resumed(launch)}, the newest checkpoint "
             f"was step {launch.expected}" for index, launch in enumerate(run.launches, 1)
             if run.resumed(launch) != launch.expected]  # fmt: skip
    said = f"{len(run.launches) - 1} relaunches, each resumed from the newest committed checkpoint"
    return "resumes", not wrong, "; ".join(wrong) or said


def runs(faulted: Outcome, base: Outcome | None) -> tuple[str, bool, str]:
    problems = faulted.problems + (base.problems if base else [])
    return (
        "runs",
        not problems,
        f"{faulted.faults} faults; " + ("; ".join(problems) or "no problem"),
    )


def orphans(soak: Soak) -> tuple[str, bool, str]:
    left = procs.alive(soak.seen.values())
    named = ", ".join(f"{proc.pid} {proc.cmdline[:40]}" for proc in left[:5])
    return "orphans", not left, f"{len(left)} of {len(soak.seen)} processes seen left {named}"


def own(start: tuple[int, int]) -> list[tuple[str, bool, str]]:
    """The soak's own file descriptors and resident memory against the bounds."""
    fds, rss = procs.fd_count(), procs.rss_bytes()
    mib = f"{start[1] / 2**20:.1f} -> {rss / 2**20:.1f} MiB (bound +{RSS_BOUND >> 20} MiB)"
    return [("soak fds", fds - start[0] <= FD_BOUND, f"{start[0]} -> {fds} (bound +{FD_BOUND})"),
            ("soak rss", rss - start[1] <= RSS_BOUND, mib)]  # fmt: skip


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
