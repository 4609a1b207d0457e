"""Python tracebacks in failure records and logs, split into the user's frames and the rest.

    tb = parse(text)                      # the last traceback in `text`, or None
    tb.exception, tb.message              # "ValueError", "token id 9 out of range ..."
    tb.user_frame()                       # the innermost frame of the user's code, or None
    tb.platform_frame()                   # the innermost frame of the platform's own code

A frame is the **platform's** when its file is in one of the project's packages (`driver/`,
`runner/`, `observability/`, `catalog/`, `warden/` under the image's `/opt/platform` or a
checkout), a **library's** when it is under site-packages, dist-packages or Python's own
library (or a `<frozen ...>`/`<string>` pseudo-file), and otherwise the **user's**: their
model, data source, transform or callback. Pure functions; table tests in
tests/diagnose/test_tracebacks.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

PLATFORM_PACKAGES = ("driver", "runner", "observability", "catalog", "warden")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')
_EXCEPTION = re.compile(
    r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Timeout|Failure|Warning|"
    r"Unavailable|Full|Stopped|Crashed|Hung|Sample)[\w]*)(?::\s?(?P<message>.*))?$"
)
_PACKAGES = "|".join(PLATFORM_PACKAGES)
_INSTALLED = re.compile(rf"(site-packages|dist-packages)/({_PACKAGES})/")
_LIBRARY = re.compile(r"(site-packages|dist-packages)/|/lib/python\d+\.\d+/|^<")
_PLATFORM = re.compile(rf"(^|/)({_PACKAGES})/[^/]+")


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    function: str
    code: str = ""

    @property
    def owner(self) -> str:
        """`user`, `platform` or `library`."""
        return owner(self.file)

    def where(self) -> str:
        return f"{self.file}:{self.line} in {self.function}"


@dataclass
class Traceback:
    frames: list[Frame] = field(default_factory=list)
    exception: str = ""
    message: str = ""

    def user_frame(self) -> Frame | None:
        """The innermost frame in the user's code (where their code called or raised)."""
        return next((f for f in reversed(self.frames) if f.owner == "user"), None)

    def platform_frame(self) -> Frame | None:
        return next((f for f in reversed(self.frames) if f.owner == "platform"), None)

    def raiser(self) -> Frame | None:
        """The innermost frame: where the exception was raised."""
        return self.frames[-1] if self.frames else None

    def headline(self) -> str:
        return f"{self.exception}: {self.message}" if self.message else self.exception


def owner(path: str) -> str:
    """Whose code a traceback's file is (see the module docstring)."""
    if _INSTALLED.search(path):
        return "platform"
    if _LIBRARY.search(path):
        return "library"
    return "platform" if _PLATFORM.search(path) else "user"


def split(text: str) -> list[list[str]]:
    """The tracebacks in `text`, each as its lines (from `Traceback (most recent call
    last):` to the exception line)."""
    out: list[list[str]] = []
    current: list[str] | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        if line.lstrip().startswith("Traceback (most recent call last):"):
            current = []
            out.append(current)
            continue
        if current is None:
            continue
        current.append(line)
        stripped = line.strip()
        if stripped and not line.startswith((" ", "\t")) and _EXCEPTION.match(stripped):
            current = None
    return out


def parse_lines(lines: list[str]) -> Traceback:
    tb = Traceback()
    pending: Frame | None = None
    for line in lines:
        if m := _FRAME.match(line):
            pending = Frame(m["file"], int(m["line"]), m["func"])
            tb.frames.append(pending)
            continue
        stripped = line.strip()
        if pending is not None and stripped and not set(stripped) <= set("^~ "):
            tb.frames[-1] = Frame(pending.file, pending.line, pending.function, stripped[:200])
            pending = None
            continue
        if (m := _EXCEPTION.match(stripped)) and not line.startswith((" ", "\t")):
            tb.exception = m["type"].rsplit(".", 1)[-1]
            tb.message = (m["message"] or "").strip()
    return tb


def parse_all(text: str) -> list[Traceback]:
    return [tb for tb in (parse_lines(lines) for lines in split(text)) if tb.frames]


def parse(text: str) -> Traceback | None:
    """The last traceback in `text` (the one that ended the process), or None."""
    found = parse_all(text)
    return found[-1] if found else None
