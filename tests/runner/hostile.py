"""Generators of hostile run definitions, DiLoCo experiment files, paths and flags, and the
rule every one must keep.

Shared by the property tests (tests/runner/test_properties.py, a few thousand examples in
the default suite), `scripts/fuzz-runs` (as many as asked) and scripts/bench/hostile_http_bench.py
(the 10,000-case figure). The rule (`check_cli`): `runner render|validate|submit|run RUN
FLAGS` ends with exit 0, or exit 2 and exactly one line on stderr starting `error: `; never
a traceback, never another exception, never a hang.

    case = cases().example()                 # one generated case (hypothesis strategy)
    code, stderr = check_case(folder, case)  # AssertionError: a traceback; Hang: no answer

A file's text may name `{loop}` (a symlink loop) or `{fifo}` (a FIFO) in `folder`: paths that
must be refused on one line like any other, as the run file itself or as its `env_file`.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import traceback
from pathlib import Path

import yaml
from hypothesis import strategies as st

from catalog import exitcodes
from runner.cli import MAX_LINE, main

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "us-docker.pkg.dev/reve-train-ultra/training/trainer@sha256:" + "ab" * 32
HANG_GUARD_S = 30  # a hang fails the example instead of blocking; not a performance bound
VALID = {
    "name": "fuzz-run",
    "type": "rayjob",
    "cluster": "ultra-usc1",
    "namespace": "research",
    "accelerator": "H200",
    "pods": 2,
    "image": IMAGE,
    "env_file": "runs/env/research.yaml",
    "train_config": "runs/train/tiny-lm.yaml",
    "train_overrides": ["optimizer.lr=3e-4"],
    "env": {"WANDB_PROJECT": "x"},
}
KEYS = [*VALID, "gpus", "cpus", "memory", "shm", "cmd", "keep_nodes", "resume", "team", "colour"]
NASTY = ["\udcff", "\x00", "\x07", "\ufeff", "é", "😀", "\u2028", "'", '"', "\\", "\t", "\n"]
# Paths a file or flag may name: outside the repository, kernel files, a symlink loop and a
# FIFO in the case's folder (`{loop}`, `{fifo}`: see check_case).
PATHS = ["/proc/self/status", "../../../../proc/self/environ", "runs/train/../../pyproject.toml",
         "/dev/zero", "{loop}", "{fifo}", "runs/train", "runs/train/tiny-lm.yaml"]  # fmt: skip
YAML_BITS = [":", "- ", "[", "]", "{", "}", "&a ", "*a", "!!python/name:os.system ", "|", ">",
             "? ", "%YAML 1.1\n", "---\n", "...\n", "<<: ", "#", ",", "@", "`"]  # fmt: skip

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**30), 10**30),
    st.floats(),
    st.text(max_size=40),
    st.sampled_from(["8", "500m", "512Gi", "0", "-1", "1e309", "nan", "H100", "job", "30m"]),
    st.sampled_from(PATHS),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
definitions = st.dictionaries(st.sampled_from(KEYS), values, max_size=4).map(
    lambda changes: {**VALID, **changes}
)


@st.composite
def big(draw) -> str:
    """A line that pushes one limit: depth, integer digits, string length, entries."""
    kind = draw(st.sampled_from(["nest", "flow", "int", "str", "list", "cmd", "keys"]))
    n = draw(st.integers(1, 3000))
    if kind == "nest":
        return "deep:" + "".join(f"\n{' ' * (2 * i + 2)}k{i}:" for i in range(min(n, 200))) + " 1"
    if kind == "flow":
        return "deep: " + "[" * n + "]" * draw(st.integers(0, n))
    if kind == "int":
        return f"{draw(st.sampled_from(['pods', 'gpus', 'ttl_seconds']))}: {'9' * n}"
    if kind == "str":
        return f"name: {'a' * (n * 40)}"
    if kind == "list":
        return "train_overrides: [" + ", ".join(["a=b"] * n) + "]"
    if kind == "cmd":
        return "cmd: " + "'x y' " * (n * 20)
    return "\n".join(f"k{i % 50}: {i}" for i in range(min(n, 400)))


@st.composite
def run_files(draw) -> bytes:
    """The bytes of a run definition: a generated mapping as YAML, then mutated."""
    return draw(mutated(draw(definitions)))


@st.composite
def mutated(draw, mapping: dict) -> bytes:
    """`mapping` as YAML, then its lines mutated (duplicated, dropped, YAML syntax, nasty
    characters, a limit pushed, indented) and bytes inserted."""
    text = yaml.safe_dump(mapping, sort_keys=False, allow_unicode=True)
    lines = text.split("\n")
    for _ in range(draw(st.integers(0, 4))):
        op = draw(st.sampled_from(["dup", "drop", "bits", "nasty", "big", "indent"]))
        at = draw(st.integers(0, len(lines)))
        if op == "dup" and lines:
            lines.insert(at, lines[at % len(lines)])
        elif op == "drop" and lines:
            lines.pop(at % len(lines))
        elif op == "bits":
            lines.insert(at, draw(st.sampled_from(YAML_BITS)) + draw(st.text(max_size=6)))
        elif op == "nasty" and lines:
            i = at % len(lines)
            cut = draw(st.integers(0, len(lines[i])))
            lines[i] = lines[i][:cut] + draw(st.sampled_from(NASTY)) + lines[i][cut:]
        elif op == "big":
            lines.insert(at, draw(big()))
        elif op == "indent" and lines:
            lines[at % len(lines)] = "  " * draw(st.integers(1, 3)) + lines[at % len(lines)]
    data = "\n".join(lines).encode("utf-8", errors="surrogateescape")
    if draw(st.booleans()):
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.binary(max_size=4)) + data[at:]
    return data


FLAGS = [
    "--type", "--cluster", "--namespace", "-n", "--team", "--pods", "--gpus", "--cpus",
    "--memory", "--accelerator", "--accelerators", "--image", "--docker-image",
    "--working-dir", "--env", "--env-file", "--priority", "--cmd", "--train-config",
    "--ttl-seconds", "--head-cpus", "--head-memory", "--rack-affinity", "--shm",
    "--resource-group", "--resume", "--keep-nodes", "--set", "--preemptible",
    "--no-preflight", "-o", "--output", "--check",
]  # fmt: skip
flag_values = st.one_of(
    st.text(max_size=24),
    st.sampled_from(NASTY + ["/dev/zero", "/dev/stdin", ".", "runs", "a=b", "=x", "9" * 50]),
    st.sampled_from(PATHS + ["a=b\x00", "\x00", "x\x00y", "true", "false", "1.0"]),
    st.integers(0, 6000).map(lambda n: "x" * n),
    st.integers(1, 5000).map(lambda n: "9" * n),
    st.text(st.characters(codec="utf-8"), max_size=8).map(lambda t: t + "\udcff"),
)
flag_lists = st.lists(st.tuples(st.sampled_from(FLAGS), flag_values), max_size=4)


def _argv(pairs: list[tuple[str, str]]) -> list[str]:
    out: list[str] = []
    for flag, value in pairs:
        if flag in ("--preemptible", "--no-preflight", "--check"):
            out.append(flag)
        elif flag.startswith("--"):
            out.append(f"{flag}={value}")
        else:
            out += [flag, value]
    return out


class Hang(Exception):
    """An example ran past HANG_GUARD_S."""


def _alarm(signum, frame):
    raise Hang(f"no answer within {HANG_GUARD_S} s")


def check_cli(argv: list[str]) -> tuple[int, str]:
    """Run `runner ARGV` in process; assert the rule; return (exit code, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(HANG_GUARD_S)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            try:
                main(argv)
                code = None
            except SystemExit as end:
                code = end.code
            except Hang:
                raise
            except Exception:  # noqa: BLE001 (what escaped main is the finding)
                raise AssertionError(f"Traceback: {traceback.format_exc()[-2000:]}") from None
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    text = err.getvalue()
    assert code in (exitcodes.OK, exitcodes.USAGE), (code, text[-2000:])
    assert "Traceback" not in text, text[-2000:]
    if code == exitcodes.USAGE:
        assert text.startswith("error: ") and text.count("\n") == 1, text[-2000:]
        assert len(text) <= MAX_LINE + 10, len(text)
    return code, text


def prepare(folder: Path) -> dict[str, str]:
    """The special files of `folder` (a symlink loop, a FIFO), made once; their paths by
    placeholder name."""
    loop, other, fifo = folder / "loop-a.yaml", folder / "loop-b.yaml", folder / "fifo.yaml"
    if not os.path.lexists(loop):
        os.symlink(other, loop)
        os.symlink(loop, other)
    if not os.path.lexists(fifo):
        os.mkfifo(fifo)
    return {"{loop}": str(loop), "{fifo}": str(fifo)}


def expand(text, places: dict[str, str]):
    """`text` (str or bytes) with the placeholders of `prepare` replaced by their paths."""
    for name, path in places.items():
        if isinstance(text, bytes):
            text = text.replace(name.encode(), path.encode())
        else:
            text = text.replace(name, path)
    return text


def check_file(folder: Path, data: bytes, pairs: list[tuple[str, str]], command: str) -> int:
    """Write `data` as a run definition in `folder` and check `runner COMMAND` on it."""
    places = prepare(folder)
    path = folder / "generated.yaml"
    path.write_bytes(expand(data, places))
    extra = ["--dry-run"] if command == "render" else []
    argv = [expand(word, places) for word in _argv(pairs)]
    code, _ = check_cli([command, str(path), *extra, *argv])
    return code
