"""Parsers of `nvidia-smi` output into one report: the `-q -x` XML and the
`--query-gpu=<QUERY> --format=csv` table. Pure functions; `runner.preflight.nvsmi` runs
nvidia-smi and judges the report.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

# The --query-gpu fields that fill a report (names as `nvidia-smi --help-query-gpu` lists them).
QUERY = [
    "index",
    "pci.bus_id",
    "name",
    "driver_version",
    "persistence_mode",
    "ecc.mode.current",
    "ecc.errors.uncorrected.volatile.total",
    "ecc.errors.corrected.volatile.total",
    "retired_pages.single_bit_ecc.count",
    "retired_pages.double_bit.count",
    "retired_pages.pending",
    "remapped_rows.pending",
    "remapped_rows.failure",
    "clocks.current.sm",
    "clocks.max.sm",
    "clocks_event_reasons.hw_slowdown",
    "clocks_event_reasons.hw_thermal_slowdown",
    "clocks_event_reasons.hw_power_brake_slowdown",
    "clocks_event_reasons.sw_thermal_slowdown",
]
REASON_PREFIX = "clocks_event_reasons."


@dataclass
class Gpu:
    """One GPU as `nvidia-smi -q -x` reports it (None: not reported, N/A)."""

    index: int
    bus_id: str
    name: str
    persistence: bool | None = None
    ecc_enabled: bool | None = None
    volatile_uncorrectable: int = 0
    volatile_correctable: int = 0
    retired_pending: bool | None = None
    retired_count: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    sm_clock: int | None = None
    max_sm_clock: int | None = None
    active_reasons: list[str] = field(default_factory=list)
    """clock event (throttle) reasons that are Active, without the prefix"""


@dataclass
class SmiReport:
    """One node's GPUs."""

    driver_version: str
    cuda_version: str | None
    """None when the source does not report it (the CSV query has no such field)"""
    gpus: list[Gpu]


def _text(node: ET.Element, path: str) -> str | None:
    value = node.findtext(path)
    value = value.strip() if value is not None else None
    return None if value in (None, "", "N/A", "[N/A]") else value


def _int(value: str | None) -> int | None:
    return int(value.split()[0]) if value and value.split()[0].isdigit() else None


def _yes(value: str | None) -> bool | None:
    return None if value is None else value in ("Yes", "Enabled")


def _gpu(index: int, node: ET.Element) -> Gpu:
    ecc = node.find("ecc_errors/volatile")
    unc = corr = 0
    for item in ecc if ecc is not None else []:
        count = _int((item.text or "").strip()) or 0
        if "uncorrectable" in item.tag:
            unc += count
        elif "correctable" in item.tag:
            corr += count
    retired = [
        _int(_text(node, f"retired_pages/{k}/retired_count"))
        for k in ("multiple_single_bit_retirement", "double_bit_retirement")
    ]
    reasons = node.find("clocks_event_reasons")
    if reasons is None:
        reasons = node.find("clocks_throttle_reasons")  # drivers before 535
    active = []
    for item in reasons if reasons is not None else []:
        if (item.text or "").strip() == "Active":
            active.append(item.tag.split("reason_", 1)[-1])
    return Gpu(
        index=index,
        bus_id=node.get("id", ""),
        name=_text(node, "product_name") or "",
        persistence=_yes(_text(node, "persistence_mode")),
        ecc_enabled=_yes(_text(node, "ecc_mode/current_ecc")),
        volatile_uncorrectable=unc,
        volatile_correctable=corr,
        retired_pending=_yes(_text(node, "retired_pages/pending_retirement")),
        retired_count=None if all(r is None for r in retired) else sum(r or 0 for r in retired),
        remap_pending=_yes(_text(node, "remapped_rows/remapped_row_pending")),
        remap_failure=_yes(_text(node, "remapped_rows/remapped_row_failure")),
        sm_clock=_int(_text(node, "clocks/sm_clock")),
        max_sm_clock=_int(_text(node, "max_clocks/sm_clock")),
        active_reasons=active,
    )


def parse_xml(text: str) -> SmiReport:
    """Parse `nvidia-smi -q -x` output."""
    root = ET.fromstring(text.encode())
    gpus = [_gpu(i, node) for i, node in enumerate(root.findall("gpu"))]
    return SmiReport(_text(root, "driver_version") or "", _text(root, "cuda_version"), gpus)


def parse_csv(text: str) -> list[dict[str, str | None]]:
    """Parse `--query-gpu=... --format=csv`: field name (units dropped) -> value (units dropped,
    `[N/A]` as None)."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    names = [h.strip().split(" [")[0] for h in lines[0].split(",")]
    rows = []
    for line in lines[1:]:
        values = [v.strip() for v in line.split(", ")]
        cells: dict[str, str | None] = {}
        for name, value in zip(names, values, strict=True):
            if value in ("[N/A]", "N/A", "[Not Supported]"):
                cells[name] = None
            elif " [" in value or value.endswith((" MHz", " MiB", " W", " %")):
                cells[name] = value.split()[0]
            else:
                cells[name] = value
        rows.append(cells)
    return rows


def report_from_csv(text: str) -> SmiReport:
    """A report from `nvidia-smi --query-gpu=<QUERY> --format=csv` output."""
    gpus = []
    for cells in parse_csv(text):
        retired = [_int(cells.get(k)) for k in QUERY[8:10]]
        gpus.append(
            Gpu(
                index=int(cells["index"] or 0),
                bus_id=cells.get("pci.bus_id") or "",
                name=cells.get("name") or "",
                persistence=_yes(cells.get("persistence_mode")),
                ecc_enabled=_yes(cells.get("ecc.mode.current")),
                volatile_uncorrectable=_int(cells.get(QUERY[6])) or 0,
                volatile_correctable=_int(cells.get(QUERY[7])) or 0,
                retired_pending=_yes(cells.get("retired_pages.pending")),
                retired_count=None
                if all(r is None for r in retired)
                else sum(r or 0 for r in retired),
                remap_pending=_yes(cells.get("remapped_rows.pending")),
                remap_failure=_yes(cells.get("remapped_rows.failure")),
                sm_clock=_int(cells.get("clocks.current.sm")),
                max_sm_clock=_int(cells.get("clocks.max.sm")),
                active_reasons=[
                    k.removeprefix(REASON_PREFIX)
                    for k, v in cells.items()
                    if k.startswith(REASON_PREFIX) and v == "Active"
                ],
            )
        )
    driver = next((c["driver_version"] for c in parse_csv(text) if c.get("driver_version")), "")
    return SmiReport(driver or "", None, gpus)
