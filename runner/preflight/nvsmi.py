"""GPU state from `nvidia-smi`: the `-q -x` XML report and `--query-gpu ... --format=csv`.

Checks: GPU count and driver/CUDA versions, ECC errors, remapped rows, retired pages,
clock slowdowns and persistence mode. Parsers are pure; `check()` runs nvidia-smi.

    nvidia-smi -q -x | python -m runner.preflight.nvsmi
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

from runner.preflight.rows import FAIL, NO_GPU, PASS, SKIP, WARN, Row

RETIRED_PAGES_LIMIT = 60  # NVIDIA's RMA threshold for retired pages per GPU
HW_SLOWDOWNS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")


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
    driver_version: str
    cuda_version: str
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
    return SmiReport(_text(root, "driver_version") or "", _text(root, "cuda_version") or "", gpus)


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


def _names(gpus: list[Gpu]) -> str:
    return ", ".join(f"GPU{g.index} ({g.bus_id})" for g in gpus)


def rows(report: SmiReport, expected_gpus: int | None = None) -> list[Row]:
    """Rows for one node's report; `expected_gpus` is the GPU count the pod asked for."""
    gpus = report.gpus
    model = gpus[0].name if gpus else "no GPUs"
    data = {
        "driver_version": report.driver_version,
        "cuda_version": report.cuda_version,
        "gpus": len(gpus),
    }
    detail = f"driver {report.driver_version}, CUDA {report.cuda_version}, {len(gpus)} x {model}"
    if expected_gpus is not None and len(gpus) < expected_gpus:
        out = [Row("nvidia-smi", FAIL, f"{detail}; expected {expected_gpus} GPUs", data=data)]
    else:
        out = [Row("nvidia-smi", PASS, detail, data=data)]
    out.append(_ecc(gpus))
    out.append(
        _verdict(
            "remapped-rows",
            [
                (FAIL, [g for g in gpus if g.remap_failure], "row remapping failed"),
                (
                    FAIL,
                    [g for g in gpus if g.remap_pending],
                    "row remap pending, GPU reset required",
                ),
            ],
            "no pending or failed remaps",
        )
    )
    out.append(
        _verdict(
            "retired-pages",
            [
                (FAIL, [g for g in gpus if g.retired_pending], "page retirement pending"),
                (
                    FAIL,
                    [g for g in gpus if (g.retired_count or 0) >= RETIRED_PAGES_LIMIT],
                    f"{RETIRED_PAGES_LIMIT}+ retired pages",
                ),
                (WARN, [g for g in gpus if (g.retired_count or 0) > 0], "retired pages"),
            ],
            "none pending"
            if any(g.retired_pending is not None for g in gpus)
            else "not reported (row remapping in use)",
        )
    )
    out.append(_clocks(gpus))
    out.append(
        _verdict(
            "persistence",
            [
                (WARN, [g for g in gpus if g.persistence is False], "persistence mode disabled"),
            ],
            "enabled on all GPUs",
        )
    )
    return out


def _ecc(gpus: list[Gpu]) -> Row:
    return _verdict(
        "ecc",
        [
            (FAIL, [g for g in gpus if g.ecc_enabled is False], "ECC disabled"),
            (FAIL, [g for g in gpus if g.volatile_uncorrectable], "uncorrectable ECC errors"),
            (WARN, [g for g in gpus if g.volatile_correctable], "correctable ECC errors"),
        ],
        "no volatile ECC errors",
    )


def _clocks(gpus: list[Gpu]) -> Row:
    slow = [g for g in gpus if any(r in HW_SLOWDOWNS for r in g.active_reasons)]
    soft = [g for g in gpus if "sw_thermal_slowdown" in g.active_reasons]
    if slow:
        reasons = sorted({r for g in slow for r in g.active_reasons if r in HW_SLOWDOWNS})
        clocks = ", ".join(f"GPU{g.index} {g.sm_clock}/{g.max_sm_clock} MHz" for g in slow)
        return Row("clocks", FAIL, f"{'/'.join(reasons)} active: {clocks}")
    if soft:
        return Row("clocks", WARN, f"sw_thermal_slowdown active: {_names(soft)}")
    return Row("clocks", PASS, "no hardware slowdown")


def _verdict(check: str, rules: list[tuple[str, list[Gpu], str]], ok: str) -> Row:
    """The first rule that matches any GPU decides; else PASS with `ok`."""
    for result, matched, what in rules:
        if matched:
            return Row(check, result, f"{what}: {_names(matched)}")
    return Row(check, PASS, ok)


CHECKS = ["nvidia-smi", "ecc", "remapped-rows", "retired-pages", "clocks", "persistence"]


def check(expected_gpus: int | None = None) -> list[Row]:
    """Run `nvidia-smi -q -x` here; SKIP rows when there is no GPU."""
    if not shutil.which("nvidia-smi"):
        return [Row(c, SKIP, NO_GPU) for c in CHECKS]
    done = subprocess.run(["nvidia-smi", "-q", "-x"], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        first = (done.stdout.strip() or done.stderr.strip() or "failed").splitlines()[0]
        return [Row("nvidia-smi", FAIL, f"nvidia-smi exited {done.returncode}: {first}")]
    return rows(parse_xml(done.stdout), expected_gpus)


def main() -> None:
    for row in rows(parse_xml(sys.stdin.read())):
        print(f"{row.result}  {row.check}  {row.detail}")


if __name__ == "__main__":
    main()
