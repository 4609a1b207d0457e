"""One-line errors for bad input: every message names the file and the field."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pydantic is heavy to import; the CLI's start-up path needs only InputError
    from pydantic import ValidationError


class InputError(Exception):
    """A user mistake (bad file, bad flag). The CLI prints it on one line and exits 2."""

    def __init__(self, source: str | Path | None, field: str | None, message: str):
        self.source = str(source) if source is not None else None
        self.field = field
        self.message = message
        super().__init__(self.line())

    def __reduce__(self):  # pickled as its three parts (a Ray worker's error reaches the
        return (type(self), (self.source, self.field, self.message))  # driver whole)

    def line(self) -> str:
        """One line, whatever the file name or the field holds (a key of a user's mapping
        can be any string: its control characters are shown escaped)."""
        where = ": ".join(printable(part) for part in (self.source, self.field) if part)
        return f"{where}: {self.message}" if where else self.message


def printable(text: str) -> str:
    """`text` with every character Python does not print escaped as Python writes it
    (`\\n`, `\\x00`, `\\x85`, `\\u2028`): no line break of any kind, no terminal control."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def first_line(err: BaseException, limit: int = 200, typed: bool = False) -> str:
    """An error's first line for a log, a reply or a message: printable (`printable`), its
    message cut to `limit` characters after escaping (the cut marked `…`), with the type
    in front when `typed` (`OSError: ...`); the type's name alone when it has no text."""
    lines = str(err).strip().splitlines()
    if not lines:
        return type(err).__name__
    line = printable(lines[0])
    line = line if len(line) <= limit else line[: limit - 1] + "…"
    return f"{type(err).__name__}: {line}" if typed else line


def field_path(loc: tuple) -> str:
    """`('gpu_pools', 0, 'reservation')` -> `gpu_pools[0].reservation`."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


_NAMED = re.compile(r"^([a-z_][a-z0-9_]*(?:\[\d+\])?(?:\.[a-z_][a-z0-9_]*(?:\[\d+\])?)*): (.+)$")


def from_validation(source: str | Path, error: ValidationError, prefix: str = "") -> InputError:
    """The first problem of a pydantic error as an InputError (with a count of the rest)."""
    problems = error.errors(include_url=False)
    first = problems[0]
    loc = tuple(p for p in first["loc"] if not str(p).startswith("function-after"))
    field = field_path(loc) or None
    if prefix:
        field = f"{prefix}.{field}" if field else prefix
    message = first["msg"].removeprefix("Value error, ")
    named = _NAMED.match(message)
    if named:  # a model-level check that names its own field: "gpu_pools[0].zone: ..."
        inner, message = named.groups()
        field = f"{field}.{inner}" if field else inner
    if first["type"] == "extra_forbidden":
        message = "unknown key"
    elif first["type"] == "missing":
        message = "required key is missing"
    if len(problems) > 1:
        message += f" (and {len(problems) - 1} more)"
    return InputError(source, field, message)
