"""Readable copies of a chDB store that another process holds.

chDB runs ONE embedded server per process, on one folder at a time, and locks that folder
(`status`) against other processes. So a store is written by one process (the driver) and
read by others through a hard-linked copy: `snapshot` copies the folder (parts are
immutable, so their files are hard-linked), and `signature` says when the store gained or
lost a part, so a reader knows when to take a new one. `runner ui`'s reader
(runner.ui.reader, a child process answering JSON lines on its pipes) reads stores this
way, so it never blocks the writer and never meets another chDB server of its own process.

    sig = signature(store_path("outputs/research/tiny-lm"))   # observability.store.store_path
    snapshot(store_path("outputs/research/tiny-lm"), Path(tmp) / "chdb")

Both are also importable from observability.store.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

_SKIP = ("status", "tmp", "user_files", "preprocessed_configs")


def signature(path: Path) -> tuple:
    """Changes whenever a table gains or loses a part (or the schema changes)."""
    marks = []
    for top in ("store", "metadata"):
        root = path / top
        if root.is_dir():
            for dirpath, dirnames, _ in os.walk(root):
                if dirpath.count(os.sep) - str(root).count(os.sep) >= 2:
                    dirnames[:] = []
                marks.append((dirpath, os.stat(dirpath).st_mtime_ns))
    return tuple(sorted(marks))


def snapshot(path: Path, dest: Path) -> Path:
    """A readable copy of a store another process may hold: parts are immutable, so their
    files are hard-linked (copied across file systems); half-written parts are left out."""

    def ignore(folder: str, names: list[str]) -> list[str]:
        top = Path(folder) == path
        return [n for n in names if n.startswith(("tmp_", "delete_tmp_")) or top and n in _SKIP]

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    for attempt in range(3):  # a part merged away while we copied: copy again
        shutil.rmtree(dest, ignore_errors=True)
        try:
            shutil.copytree(path, dest, symlinks=True, ignore=ignore, copy_function=link)
            return dest
        except (FileNotFoundError, shutil.Error):
            if attempt == 2:
                raise
    return dest
