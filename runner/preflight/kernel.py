"""Kernel log checks: NVIDIA Xid and SXid errors, ECC and row remapping, PCIe AER, NVLink,
OOM kills and hung tasks, parsed from `dmesg` or `journalctl -k` lines.

    python -m runner.preflight.kernel < /var/log/kern.log   # print the findings
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

from catalog.xid import XIDS
from observability import kernel_log
from runner.preflight.rows import FAIL, PASS, SKIP, WARN, Row, worst

# Xid code -> (category, severity, meaning), from the platform's one Xid catalog
# (catalog/xid.py, NVIDIA's meanings and resolution buckets). Unlisted codes are WARN under "xid".
XID: dict[int, tuple[str, str, str]] = {
    code: (x.kind, FAIL if x.fatal else WARN, x.meaning) for code, x in XIDS.items()
}
CATEGORIES = ["xid", "xid-ecc", "xid-row-remap", "nvlink", "sxid", "pcie-aer", "oom", "hung-task"]

_XID = re.compile(r"NVRM: Xid \(PCI:(?P<dev>[0-9a-fA-F:.]+)\): (?P<code>\d+),\s*(?P<rest>.*)")
_SXID = re.compile(
    r"SXid \(PCI:(?P<dev>[0-9a-fA-F:.]+)\): (?P<code>\d+), (?P<sev>Fatal|Non-fatal),\s*(?P<rest>.*)"
)
_AER = re.compile(
    r"(?P<dev>[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]): PCIe Bus Error: "
    r"severity=(?P<sev>[^,]+)"
)
_NVLINK = re.compile(r"NVRM: .*\bNVLink\b.*\b(error|fault|fail)", re.IGNORECASE)
_OOM = re.compile(
    r"(?:Memory cgroup out of memory|Out of memory): Killed process (?P<pid>\d+) "
    r"\((?P<name>[^)]*)\)"
)
_HUNG = re.compile(r"INFO: task (?P<name>.+):(?P<pid>\d+) blocked for more than (?P<s>\d+) seconds")
# What precedes the message: `pid=..., name=..., ` (driver 470+) or `pid=..., ` (older), and a
# channel `Ch 00000008, ` on some codes.
_PROCESS = re.compile(r"^(?:pid=[^,]*, )?(?:name=[^,]*, )?(?:Ch [0-9a-f]+, )?", re.IGNORECASE)


@dataclass(frozen=True)
class Finding:
    """One kernel log line that matters."""

    category: str
    """one of CATEGORIES"""
    severity: str
    """WARN or FAIL"""
    device: str
    """PCI address, task or process it concerns"""
    message: str
    """what it means, short"""
    code: int | None = None
    """Xid or SXid number"""


def parse_line(line: str) -> Finding | None:
    """The finding in one log line (dmesg, dmesg --time-format iso or journal), or None."""
    if m := _XID.search(line):
        code = int(m["code"])
        category, severity, meaning = XID.get(code, ("xid", WARN, ""))
        text = meaning or _PROCESS.sub("", m["rest"]).strip()
        return Finding(category, severity, m["dev"], f"Xid {code}: {text}", code)
    if m := _SXID.search(line):
        severity = FAIL if m["sev"] == "Fatal" else WARN
        text = f"SXid {m['code']} ({m['sev']}): {m['rest'].strip()}"
        return Finding("sxid", severity, m["dev"], text, int(m["code"]))
    if m := _AER.search(line):
        severity = WARN if m["sev"].strip() == "Corrected" else FAIL
        return Finding("pcie-aer", severity, m["dev"], f"PCIe {m['sev'].strip()} error")
    if _NVLINK.search(line):
        return Finding("nvlink", FAIL, "", line.split("NVRM: ", 1)[1].strip())
    if m := _OOM.search(line):
        return Finding("oom", WARN, f"{m['name']} pid {m['pid']}", "OOM kill")
    if m := _HUNG.search(line):
        return Finding(
            "hung-task", WARN, f"{m['name']} pid {m['pid']}", f"blocked for more than {m['s']} s"
        )
    return None


def parse(text: str) -> list[Finding]:
    return [f for line in text.splitlines() if (f := parse_line(line))]


def rows(findings: list[Finding]) -> list[Row]:
    """One row per category: PASS when nothing was found, else the worst finding first."""
    out = []
    for category in CATEGORIES:
        hits = [f for f in findings if f.category == category]
        if not hits:
            out.append(Row(category, PASS, "no entries"))
            continue
        hits.sort(key=lambda f: f.severity != FAIL)
        first = hits[0]
        where = f" on {first.device}" if first.device else ""
        more = f" (+{len(hits) - 1} more)" if len(hits) > 1 else ""
        out.append(Row(category, worst(f.severity for f in hits), f"{first.message}{where}{more}"))
    return out


def read_log() -> tuple[str | None, str]:
    """The kernel log and where it came from; (None, reason) when it cannot be read."""
    return kernel_log.read()


def check(text: str | None = None) -> list[Row]:
    """Kernel log rows, reading the log unless `text` is given."""
    source = "given"
    if text is None:
        text, source = read_log()
        if text is None:
            return [Row(c, SKIP, f"kernel log not readable ({source})") for c in CATEGORIES]
    return rows(parse(text))


def main() -> None:
    for finding in parse(sys.stdin.read()):
        print(f"{finding.severity}  {finding.category}  {finding.device}  {finding.message}")


if __name__ == "__main__":
    main()
