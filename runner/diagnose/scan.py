"""Finding the lines that matter in a run's logs, fast: a gigabyte in seconds.

The analysis reads only lines that could be evidence: every file is searched for a few
byte strings (`NEEDLES`: error levels, NCCL, Xid, tracebacks, timeouts, kills) by `grep -F`
(one pass for all of them), or where grep is missing in large blocks with bytes.find, and
only the lines holding one are decoded. A
line of a log file the platform writes (`logs/*.jsonl`: one `platform.run_logs` row a line)
is read as JSON for its labels; any other line is plain text (container logs, kernel logs).

    for line in scan([Path("logs/train-rank-3.jsonl")], root=Path(".")):
        line.source, line.number, line.rank, line.text

Pure but the file reads; no file is read twice, none is read whole into memory.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

NEEDLES = (
    b"ERROR",
    b"Error",
    b"error",
    b"CRITICAL",
    b"FATAL",
    b"Traceback",
    b"NCCL",
    b"Xid",
    b"imed out",
    b"atchdog",
    b"Killed",
    b"killed",
    b"SIGTERM",
    b"SIGKILL",
    b"preempt",
    b"No space",
    b"out of memory",
    b"Exception",
    b"WARN",
    b"loss nan",
    b"loss inf",
    b"loss -inf",
    b"NaN",
)
BLOCK = 16 << 20
MAX_HITS_PER_FILE = 2000
MAX_LINE = 4000
GREP_BATCH = 256  # files per grep
_RANK = re.compile(r"\brank[= ](\d+)\b")


@dataclass(frozen=True)
class Line:
    """One line of evidence: where it is (`source`, 1-based `number`) and what it says."""

    source: str
    number: int
    text: str
    rank: int | None = None
    pod: str = ""
    node: str = ""
    level: str = ""
    ts: float | None = None

    def narrow(self, pattern) -> Line:
        """This line with only the first of its physical lines that `pattern` matches (a
        log record may hold a whole traceback)."""
        if "\n" not in self.text:
            return self
        pick = next((x for x in self.text.splitlines() if pattern.search(x)), None)
        if pick is None:
            pick = self.text.splitlines()[0]
        return Line(
            self.source,
            self.number,
            pick.strip(),
            self.rank,
            self.pod,
            self.node,
            self.level,
            self.ts,
        )

    def quote(self) -> dict:
        where = f"{self.source}:{self.number}" if self.number else self.source
        return {"source": where, "line": self.text[:MAX_LINE]}


def line_of(raw: bytes, source: str, number: int, node: str = "") -> Line:
    """A Line from one raw line: a run_logs row (JSON) or plain text."""
    text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
    if text.startswith("{") and '"line"' in text:
        try:
            row = json.loads(text)
        except ValueError:
            row = None
        if isinstance(row, dict) and isinstance(row.get("line"), str):
            rank = row.get("rank")
            return Line(
                source,
                number,
                row["line"][:MAX_LINE],
                rank if isinstance(rank, int) and rank >= 0 else None,
                str(row.get("pod") or ""),
                str(row.get("node") or node),
                str(row.get("level") or ""),
                row.get("ts") if isinstance(row.get("ts"), int | float) else None,
            )
    m = _RANK.search(text)
    return Line(source, number, text[:MAX_LINE], int(m[1]) if m else None, node=node)


def hits(data: bytes, needles: Iterable[bytes] = NEEDLES) -> list[int]:
    """Start offsets of the lines of `data` holding any needle (sorted, unique)."""
    starts = set()
    for needle in needles:
        at = data.find(needle)
        while at != -1:
            start = data.rfind(b"\n", 0, at) + 1
            starts.add(start)
            if len(starts) > MAX_HITS_PER_FILE * 4:
                break
            end = data.find(b"\n", at)
            at = data.find(needle, end if end != -1 else len(data))
    return sorted(starts)


def scan_file(
    path: Path, source: str, node: str = "", needles: Iterable[bytes] = NEEDLES
) -> Iterator[Line]:
    """The lines of one file that hold a needle (at most MAX_HITS_PER_FILE)."""
    try:
        handle = path.open("rb")
    except OSError:
        return
    with handle:
        carry, offset_lines, found = b"", 0, 0
        while block := handle.read(BLOCK):
            data = carry + block
            cut = data.rfind(b"\n") + 1 or len(data)
            data, carry = (data[:cut], data[cut:]) if cut else (data, b"")
            counted, number = 0, offset_lines
            for start in hits(data, needles):
                number += data.count(b"\n", counted, start)
                counted = start
                end = data.find(b"\n", start)
                yield line_of(
                    data[start : end if end != -1 else len(data)], source, number + 1, node
                )
                found += 1
                if found >= MAX_HITS_PER_FILE:
                    return
            offset_lines += data.count(b"\n")
        if carry:
            for start in hits(carry, needles):
                end = carry.find(b"\n", start)
                yield line_of(
                    carry[start : end if end != -1 else len(carry)],
                    source,
                    offset_lines + carry.count(b"\n", 0, start) + 1,
                    node,
                )


def source_of(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.name


def grep_hits(paths: list[Path], needles=NEEDLES) -> dict[Path, list[tuple[int, bytes]]] | None:
    """{file: [(line number, line)]} of the lines holding a needle, found by `grep -F` (a
    multi-string search several times faster than Python's, per file at most
    MAX_HITS_PER_FILE); None when grep is missing or fails (the caller searches itself)."""
    grep = shutil.which("grep")
    if grep is None:
        return None
    patterns = [arg for n in needles for arg in ("-e", n.decode())]
    found: dict[Path, list[tuple[int, bytes]]] = {p: [] for p in paths}
    by_name = {str(p).encode(): p for p in paths}
    for start in range(0, len(paths), GREP_BATCH):
        batch = [str(p) for p in paths[start : start + GREP_BATCH]]
        command = [grep, "-F", "-a", "-n", "-H", "-Z", "-m", str(MAX_HITS_PER_FILE), *patterns,
                   "--", *batch]  # fmt: skip
        try:
            done = subprocess.run(command, capture_output=True, env={"LC_ALL": "C"}, timeout=600)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if done.returncode not in (0, 1):
            return None
        for raw in done.stdout.split(b"\n"):
            name, _, rest = raw.partition(b"\0")
            number, _, text = rest.partition(b":")
            if name in by_name and number.isdigit():
                found[by_name[name]].append((int(number), text))
    return found


def scan(paths: Iterable[Path], root: Path, nodes: dict[str, str] | None = None) -> list[Line]:
    """Every evidence line of `paths` (sources relative to `root`); `nodes`: file -> node
    for files that are one node's (kernel logs). grep finds them when it is installed."""
    paths, nodes = list(paths), nodes or {}
    found = grep_hits(paths) if paths else {}
    out = []
    for path in paths:
        source, node = source_of(path, root), nodes.get(str(path), "")
        if found is None:
            out.extend(scan_file(path, source, node))
        else:
            out.extend(line_of(text, source, number, node) for number, text in found[path])
    return out


def read_lines(path: Path, root: Path, node: str = "", limit: int = 100_000) -> list[Line]:
    """Every line of a small file (a kernel log, a failure record), as Lines."""
    try:
        raw = path.read_bytes()
    except OSError:
        return []
    try:
        source = path.relative_to(root).as_posix()
    except ValueError:
        source = path.name
    lines = raw.splitlines()
    first = max(0, len(lines) - limit)
    return [
        line_of(text, source, first + i + 1, node)
        for i, text in enumerate(lines[first:])
        if text.strip()
    ]
