"""Whole hostile cases for the runner's command line: a file (a run definition or a DiLoCo
experiment), where it lies, the command and its flags; and the count of a fuzzing session.

    from hypothesis import given
    @given(case=cases())
    def test(case): check_case(folder, case)         # AssertionError: a traceback; Hang

    report = fuzz(folder, count=10_000)              # scripts/fuzz-runs, hostile_http_bench.py
    print(report.line())   # "10000 cases (...): 0 tracebacks, 0 hangs, ..."

The generators of files and flags are tests/runner/hostile.py's; this module adds the
experiment files (the DiLoCo example, its values and blocks replaced), hostile run file
locations (a symlink loop, a FIFO, /proc, a NUL in the name, a folder) and the commands
(`render --dry-run`, `validate`, `submit -f --dry-run`, `run --local --dry-run`).
"""

from __future__ import annotations

import collections
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import seed as hseed
from hypothesis import strategies as st

from tests.runner import hostile

EXPERIMENT = yaml.safe_load((hostile.ROOT / "runs/examples/diloco-two-regions.yaml").read_text())
BLOCKS = {
    "diloco": ["sync_every", "mode", "merge", "compression", "outer_lr", "fragments",
               "min_learners", "barrier_timeout_s", "nesterov"],
    "synchronizer": ["cluster", "host", "port", "state", "cpus", "memory"],
}  # fmt: skip
RUN_KEYS = [*hostile.KEYS, "train_overrides", "env", "pods", "name", "cluster", "learners"]
# Where the RUN argument points, besides the generated file itself.
LOCATIONS = ["{loop}", "{fifo}", "/proc/self/status", "/dev/zero", "nul\x00.yaml", ".",
             "missing.yaml", "bad\udcff.yaml"]  # fmt: skip
COMMANDS = ["render", "validate", "submit", "run"]
ROUND = 500  # cases per hypothesis run


@st.composite
def experiment_data(draw) -> dict:
    """The DiLoCo example with up to four of its values replaced by hostile ones."""
    data = yaml.safe_load(yaml.safe_dump(EXPERIMENT))
    for _ in range(draw(st.integers(1, 4))):
        value = draw(hostile.values)
        where = draw(st.sampled_from(["top", "learner", *BLOCKS]))
        if where == "top":
            data[draw(st.sampled_from(RUN_KEYS))] = value
        elif where == "learner" and isinstance(data.get("learners"), list) and data["learners"]:
            learner = data["learners"][draw(st.integers(0, len(data["learners"]) - 1))]
            if isinstance(learner, dict):
                learner[draw(st.sampled_from([*RUN_KEYS, "cluster"]))] = value
        elif isinstance(data.get(where), dict):
            data[where][draw(st.sampled_from(BLOCKS[where]))] = value
    return data


@st.composite
def experiment_files(draw) -> bytes:
    """An experiment file: as generated (half of them, so most reach the renderer), or
    then mutated like a run definition."""
    data = draw(experiment_data())
    if draw(st.booleans()):
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True).encode(
            "utf-8", errors="surrogateescape")  # fmt: skip
    return draw(hostile.mutated(data))


@dataclass(frozen=True)
class Case:
    """One command line to try: `data` written as the run file unless `location` names
    another path; `pairs` are its flags."""

    command: str
    data: bytes
    pairs: tuple[tuple[str, str], ...]
    location: str | None = None

    def argv(self, path: str) -> list[str]:
        flags = hostile._argv(list(self.pairs))
        if self.command == "render":
            return ["render", path, "--dry-run", *flags]
        if self.command == "submit":
            return ["submit", "-f", path, "--dry-run", *flags]
        if self.command == "run":  # its flags are --set values
            return ["run", "--local", path, "--dry-run", *(f"--set={v}" for _, v in self.pairs)]
        return ["validate", path, *flags]


@st.composite
def cases(draw) -> Case:
    """A run definition (most), an experiment file or a hostile location, with flags."""
    kind = draw(st.sampled_from(["run", "run", "experiment", "location"]))
    data = draw(experiment_files() if kind == "experiment" else hostile.run_files())
    location = draw(st.sampled_from(LOCATIONS)) if kind == "location" else None
    pairs = draw(hostile.flag_lists)
    if kind == "experiment" and draw(st.booleans()):
        pairs = []  # run flags do not apply to experiments: try them alone too
    return Case(draw(st.sampled_from(COMMANDS)), data, tuple(pairs), location)


def check_case(folder: Path, case: Case) -> tuple[int, str]:
    """Write the case's file in `folder` and check its command (hostile.check_cli)."""
    places = hostile.prepare(folder)
    path = folder / "generated.yaml"
    path.write_bytes(hostile.expand(case.data, places))
    where = str(path) if case.location is None else hostile.expand(case.location, places)
    if case.location is not None and not where.startswith("/"):
        where = str(folder / where)
    argv = [hostile.expand(word, places) for word in case.argv(where)]
    return hostile.check_cli(argv)


@dataclass
class Report:
    """What a fuzzing session found."""

    cases: int = 0
    seconds: float = 0.0
    codes: collections.Counter = field(default_factory=collections.Counter)
    kinds: collections.Counter = field(default_factory=collections.Counter)
    tracebacks: list[str] = field(default_factory=list)
    hangs: list[str] = field(default_factory=list)
    slowest: tuple[float, str] = (0.0, "")

    def line(self) -> str:
        return (f"{self.cases} cases ({self.codes[0]} exit 0, {self.codes[2]} exit 2) in "
                f"{self.seconds:.0f} s: {len(self.tracebacks)} tracebacks, "
                f"{len(self.hangs)} hangs")  # fmt: skip


def kind(line: str) -> str:
    """A message with its values removed: `gpus: line N: duplicate key (lines N and N)`."""
    text = re.sub(r"^error: \S+?: ", "", line.strip())
    text = re.sub(r"'[^']*'|\"[^\"]*\"|\d+", "N", text)
    return text[:70]


def fuzz(folder: Path, count: int, seconds: float = float("inf"), seed: int = 0) -> Report:
    """Run `count` generated cases (or until `seconds` passed) through `check_case`, in
    rounds of ROUND cases, each round from its own seed (`seed`, `seed + 1` ...)."""
    report, started = Report(), time.monotonic()

    def one(case: Case) -> None:
        if report.cases >= count or time.monotonic() - started > seconds:
            return
        report.cases += 1
        begun = time.perf_counter()
        try:
            code, err = check_case(folder, case)
        except hostile.Hang:
            report.hangs.append(repr(case)[:600])
            return
        except AssertionError as fail:
            report.tracebacks.append(f"{case!r}"[:600] + f"\n  {str(fail)[-800:]}")
            return
        took = time.perf_counter() - begun
        if took > report.slowest[0]:
            report.slowest = (took, f"{case.command} {case.data[:50]!r}")
        report.codes[code] += 1
        if code:
            report.kinds[kind(err)] += 1

    rounds = 0
    while report.cases < count and time.monotonic() - started < seconds:
        run = settings(max_examples=min(ROUND, count - report.cases), deadline=None,
                       database=None, suppress_health_check=list(HealthCheck))(
            given(case=cases())(one))  # fmt: skip
        hseed(seed + rounds)(run)()
        rounds += 1
    report.seconds = time.monotonic() - started
    return report
