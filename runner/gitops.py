"""apps/ files: deterministic text, headers naming the source, and the check.

`runner render` writes `apps/<cluster>/<namespace>/<run>.yaml`; the first header line names
the run definition it came from. `check_apps()` re-renders every committed run definition
(`runs/**/*.yaml` except `runs/train/` and `runs/env/`) and reports files that differ.
Staging those files onto a branch for a PR is `runner.gitstage`.
"""

from __future__ import annotations

import difflib
import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from catalog.errors import InputError, printable
from catalog.loader import repo_root
from runner.boundedfile import is_regular_file, read_bytes
from runner.yamltext import dump_documents

NOT_RUNS = ("train", "env")
APPS_FILE_LIMIT = 8 * 2**20
_SOURCE = re.compile(r"^# Rendered by runner from (.+); do not edit by hand\.$")


def dump(manifests: list[dict]) -> str:
    """Manifests as YAML documents in template order (stable: the same input, the same text)."""
    return dump_documents(manifests)


def comment(text: str) -> str:
    """`text` safe inside a one-line YAML comment: line breaks and other non-printable
    characters escaped (`\\n`), so no file name or flag value can add a line to the file."""
    return printable(text)


def header(source: str, totals: str, flags: list[str], notices: Sequence[str] = ()) -> str:
    """The comment lines an apps/ file starts with; each of `notices` (what keeps the run
    from starting, runner.unbuilt) as a `# WARNING:` line anyone reviewing the file sees."""
    source = comment(source)
    lines = [f"# Rendered by runner from {source}; do not edit by hand."]
    if flags:
        lines.append(f"# Command-line overrides: {comment(' '.join(flags))}")
    lines.append(f"# Re-render: runner render {source}")
    lines.append(f"# {comment(totals)}")
    lines += [f"# WARNING: {comment(notice)}" for notice in notices]
    return "\n".join(lines) + "\n"


def relative_to_root(path: Path, root: Path | None = None) -> str:
    """`apps/x/y/z.yaml` for a path inside the repository, else the path as given."""
    try:
        return path.resolve().relative_to((root or repo_root()).resolve()).as_posix()
    except (ValueError, OSError, RuntimeError):  # outside the root; a symlink loop
        return str(path)


def apps_path(cluster: str, namespace: str, name: str, root: Path | None = None) -> Path:
    return (root or repo_root()) / "apps" / cluster / namespace / f"{name}.yaml"


def rendered_source(path: Path) -> str | None:
    """The run definition an apps/ file names in its header, if any."""
    if not is_regular_file(path):
        return None
    try:
        with path.open() as handle:
            match = _SOURCE.match(handle.readline(4096).rstrip("\n"))
    except (OSError, UnicodeDecodeError):
        return None
    return match.group(1) if match else None


def check_unique(cluster: str, namespace: str, name: str, source: str, root: Path | None = None):
    """Refuse a run whose name another run definition already uses in the namespace."""
    path = apps_path(cluster, namespace, name, root)
    if not path.exists():
        return
    existing = rendered_source(path)
    if existing != comment(source):
        raise InputError(
            source,
            "name",
            f"run {name!r} already exists in {cluster}/{namespace} "
            f"(apps/{cluster}/{namespace}/{name}.yaml, from {existing or 'an unknown source'})",
        )


def write(path: Path, text: str) -> bool:
    """Write if the text changed; True when the file was written."""
    if path.exists() and path.read_text() == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return True


def write_all(files: dict[Path, str]) -> dict[Path, bool]:
    """Write several files all or nothing: each new text goes to a temporary file beside
    its target first; only when every one is written are they renamed into place (a failed
    write removes the temporary files and writes nothing). Path -> True when it changed."""
    changed = {p: not (p.exists() and p.read_text() == text) for p, text in files.items()}
    staged: list[tuple[Path, Path]] = []
    try:
        for path, text in files.items():
            if not changed[path]:
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
            staged.append((Path(temp), path))
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
        for temp, path in staged:
            os.replace(temp, path)
    finally:
        for temp, _ in staged:
            temp.unlink(missing_ok=True)
    return changed


def run_definitions(root: Path | None = None) -> list[Path]:
    """Committed run definitions: runs/**/*.yaml outside runs/train/ and runs/env/."""
    base = (root or repo_root()) / "runs"
    found = []
    for path in sorted(base.rglob("*.yaml")):
        parts = path.relative_to(base).parts
        if parts[0] not in NOT_RUNS:
            found.append(path)
    return found


@dataclass
class Difference:
    """One apps/ file that is not what its run definition renders."""

    path: str
    diff: str


def diff_text(path: str, old: str, new: str) -> str:
    lines = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile=f"a/{path}",
        tofile=f"b/{path}",
    )
    return "".join(lines)


def foreign(expected: set[Path], root: Path | None = None) -> list[tuple[Path, str]]:
    """(path, why) for everything under apps/ that `runner render` did not write: a file
    without the renderer's header (any name, any depth, hidden ones too), a symbolic link,
    or anything that is not a regular file. Files with a header are `orphans` or re-rendered.
    """
    base = (root or repo_root()) / "apps"
    found = []
    for folder, subfolders, files in os.walk(base):
        for name in sorted(subfolders):
            if (Path(folder) / name).is_symlink():
                found.append((Path(folder) / name, "a symbolic link"))
        for name in sorted(files):
            path = Path(folder) / name
            if path.is_symlink():
                found.append((path, "a symbolic link"))
            elif not is_regular_file(path):
                found.append((path, "not a regular file"))
            elif path not in expected and rendered_source(path) is None:
                found.append((path, "has no `# Rendered by runner` header: not written by runner"))
    return sorted(found)


def read_apps_file(path: Path) -> str:
    """The text of an apps/ file ('' when missing); bounded, regular files only."""
    if not path.exists() and not path.is_symlink():
        return ""
    data = read_bytes(path, relative_to_root(path), limit=APPS_FILE_LIMIT)
    return data.decode("utf-8", errors="replace")


def orphans(expected: set[Path], root: Path | None = None) -> list[Path]:
    """apps/ run files that no committed run definition renders."""
    base = (root or repo_root()) / "apps"
    found = []
    for path in sorted(base.glob("*/*/*.yaml")):
        if path not in expected and rendered_source(path) is not None:
            found.append(path)
    return found
