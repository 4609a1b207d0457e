"""Read run definitions and env files: bounded, regular files only, strict YAML.

Every problem is one `InputError` naming the file (and the key or line), never a traceback
or a hang, whatever the file holds:

- only a regular file is read (a FIFO, a device such as /dev/zero or a folder is refused
  before a byte is read), at most `MAX_FILE_BYTES` (`runner.boundedfile`);
- the text must be UTF-8;
- the YAML is built from the parser's events without recursion: at most `MAX_DEPTH`
  levels of nesting, `MAX_ITEMS` entries per mapping or list, `MAX_SCALAR` characters per
  value and `MAX_INT_DIGITS` digits per integer; one document; no anchors, aliases or tags;
- a key given twice in one mapping is refused, naming both lines.

    from runner.runfile import read_yaml_file
    data = read_yaml_file(Path("runs/examples/tiny-lm.yaml"), "runs/examples/tiny-lm.yaml")

The limits are documented in docs/runner.md (Validation).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.events import (
    AliasEvent,
    CollectionEndEvent,
    CollectionStartEvent,
    DocumentStartEvent,
    MappingStartEvent,
    ScalarEvent,
    StreamEndEvent,
)
from yaml.nodes import ScalarNode

from catalog.errors import InputError
from runner.boundedfile import read_bytes

MAX_DEPTH = 16
MAX_ITEMS = 1000
MAX_SCALAR = 64 * 1024
MAX_INT_DIGITS = 20  # beyond any 64-bit integer
SHOWN = 60  # characters of a value quoted in a message

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_TAGS = {f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null")}
_INT = "tag:yaml.org,2002:int"


def shown(value: Any, limit: int = SHOWN) -> str:
    """`repr(value)`, cut to `limit` characters: for quoting user values in messages."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 4] + "...'"


def decode(data: bytes, source: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        byte = data[err.start]
        raise InputError(source, None, f"line {line}: not UTF-8 text (byte 0x{byte:02x})") from None


def read_yaml_file(path: Path, source: str) -> Any:
    """Read and parse one YAML file within the limits above."""
    return parse_yaml(decode(read_bytes(path, source), source), source)


def parse_yaml(text: str, source: str) -> Any:
    """One YAML document as Python values (None when empty), within the limits above."""
    loader = _Loader(text)
    try:
        return _Builder(loader, source).document()
    except yaml.YAMLError as err:
        raise InputError(source, None, _problem(err)) from None
    finally:
        loader.dispose()


def _problem(err: yaml.YAMLError) -> str:
    mark = getattr(err, "problem_mark", None)
    where = f"line {mark.line + 1}: " if mark else ""
    if isinstance(err, yaml.reader.ReaderError):
        return f"character {shown(chr(err.character))} at position {err.position} is not allowed"
    problem = getattr(err, "problem", None) or "invalid YAML"
    return f"{where}{problem}"


class _Frame:
    """An open mapping or sequence: its value, its field path and, for a mapping, the key
    waiting for its value and the line of every key seen."""

    def __init__(self, value: dict | list, path: str):
        self.value, self.path = value, path
        self.key: Any = _NO_KEY
        self.key_line = 0
        self.lines: dict[Any, int] = {}

    def child_path(self) -> str:
        if isinstance(self.value, list):
            return f"{self.path}[{len(self.value)}]"
        return f"{self.path}.{self.key}" if self.path else str(self.key)


_NO_KEY = object()


class _Builder:
    """Python values from parser events, with an explicit stack (no recursion)."""

    def __init__(self, loader, source: str):
        self.loader, self.source = loader, source
        self.stack: list[_Frame] = []

    def error(self, field: str | None, line: int, message: str) -> InputError:
        if field and len(field) > SHOWN:
            field = field[: SHOWN - 3] + "..."
        return InputError(self.source, field or None, f"line {line}: {message}")

    def document(self) -> Any:
        loader, result, documents = self.loader, None, 0
        while True:
            event = loader.get_event()
            if isinstance(event, StreamEndEvent):
                return result
            if isinstance(event, DocumentStartEvent):
                documents += 1
                if documents > 1:
                    line = event.start_mark.line + 1
                    raise self.error(None, line, "one YAML document expected, found more")
                result = self.value(loader.get_event())

    def value(self, event) -> Any:
        """The value that starts with `event`: a scalar, or a whole collection."""
        result = self.item(event, "")
        while self.stack:
            event = self.loader.get_event()
            if isinstance(event, CollectionEndEvent):
                self.stack.pop()
                continue
            frame, line = self.stack[-1], event.start_mark.line + 1
            if isinstance(frame.value, dict) and frame.key is _NO_KEY:
                self.key(frame, event, line)
                continue
            self.place(frame, self.item(event, frame.child_path()), line)
        return result

    def key(self, frame: _Frame, event, line: int) -> None:
        if not isinstance(event, ScalarEvent):
            raise self.error(frame.path, line, "a key must be a plain value")
        self.plain(event, frame.path, line)
        key = self.scalar(event, frame.path, line)
        first = frame.lines.get(key)
        if first is not None:
            path = f"{frame.path}.{key}" if frame.path else str(key)
            raise self.error(path, line, f"duplicate key (lines {first} and {line})")
        frame.key, frame.key_line = key, line

    def plain(self, event, path: str, line: int) -> None:
        if isinstance(event, AliasEvent) or getattr(event, "anchor", None):
            raise self.error(path, line, "anchors and aliases are not supported")

    def item(self, event, path: str) -> Any:
        """A scalar's value, or a new empty collection (pushed, filled by later events)."""
        line = event.start_mark.line + 1
        self.plain(event, path, line)
        if isinstance(event, ScalarEvent):
            return self.scalar(event, path, line)
        if not isinstance(event, CollectionStartEvent):
            raise self.error(path, line, "invalid YAML")
        if event.tag and not event.implicit:
            raise self.error(path, line, f"tag {shown(event.tag)} is not supported")
        if len(self.stack) >= MAX_DEPTH:
            raise self.error(path, line, f"nested deeper than {MAX_DEPTH} levels")
        frame = _Frame({} if isinstance(event, MappingStartEvent) else [], path)
        self.stack.append(frame)
        return frame.value

    def scalar(self, event, path: str, line: int) -> Any:
        value = event.value
        if len(value) > MAX_SCALAR:
            message = f"a value of {len(value)} characters (at most {MAX_SCALAR})"
            raise self.error(path, line, message)
        tag = event.tag
        if tag in (None, "!"):
            tag = self.loader.resolve(ScalarNode, value, event.implicit)
        elif tag not in _TAGS:
            raise self.error(path, line, f"tag {shown(tag)} is not supported")
        if tag == _INT and sum(c.isdigit() for c in value) > MAX_INT_DIGITS:
            raise self.error(path, line, f"an integer of more than {MAX_INT_DIGITS} digits")
        node = ScalarNode(tag, value, event.start_mark, event.end_mark, event.style)
        try:
            return self.loader.construct_object(node)
        except (ValueError, OverflowError, yaml.YAMLError):
            raise self.error(path, line, f"cannot read the value {shown(value)}") from None

    def place(self, frame: _Frame, item: Any, line: int) -> None:
        if len(frame.value) >= MAX_ITEMS:
            raise self.error(frame.path, line, f"more than {MAX_ITEMS} entries")
        if isinstance(frame.value, list):
            frame.value.append(item)
            return
        frame.value[frame.key] = item
        frame.lines[frame.key] = frame.key_line
        frame.key = _NO_KEY
