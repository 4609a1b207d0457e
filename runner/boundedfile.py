"""Bounded file reading: regular files only, a byte limit, never a hang.

`read_bytes` opens without blocking and refuses anything but a regular file (a FIFO, a
device such as /dev/zero, a folder or a socket) before a byte is read, and more than its
limit (`MAX_FILE_BYTES` unless told) without reading the rest; every problem is one
`InputError` naming the file. Run definitions and env files (`runner.runfile`) and apps/
files (`runner.gitops`) are read through it.

    from runner.boundedfile import read_bytes
    data = read_bytes(Path("runs/examples/tiny-lm.yaml"), "runs/examples/tiny-lm.yaml")
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from catalog.errors import InputError

MAX_FILE_BYTES = 256 * 1024


class FileMissing(InputError):
    """The file does not exist (callers may word this their own way)."""


def is_regular_file(path: Path) -> bool:
    """True for a regular file (after symlinks); False for anything else or any OS error."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def read_bytes(path: Path, source: str, limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; never blocks on a FIFO."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise FileMissing(source, None, "file not found") from None
    except OSError as err:
        raise InputError(source, None, f"cannot read: {err.strerror}") from None
    except ValueError:
        raise InputError(source, None, "cannot read: the file name contains a NUL") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputError(source, None, f"not a regular file ({_kind(info.st_mode)})")
        if info.st_size > limit:
            raise InputError(source, None, f"{info.st_size} bytes; at most {limit} are read")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise InputError(source, None, f"more than {limit} bytes; at most {limit} are read")
        return b"".join(chunks)
    except OSError as err:
        raise InputError(source, None, f"cannot read: {err.strerror}") from None
    finally:
        os.close(fd)


def _kind(mode: int) -> str:
    kinds = [
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ]
    return next((name for test, name in kinds if test(mode)), "not a file")
