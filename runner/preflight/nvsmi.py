"""GPU state from `nvidia-smi`: GPU count and driver/CUDA versions, ECC errors, remapped
rows, retired pages, clock slowdowns and persistence mode.

`check()` runs `nvidia-smi -q -x`, and falls back to the `--query-gpu` CSV when that fails
or its XML does not parse; both become one `SmiReport` (parsers in
`runner.preflight.smi_parse`), judged by the pure `rows()`.

    nvidia-smi -q -x | python -m runner.preflight.nvsmi
    nvidia-smi --query-gpu=$(python -c 'from runner.preflight.smi_parse import QUERY; \
        print(",".join(QUERY))') --format=csv | python -m runner.preflight.nvsmi --csv
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

from runner.preflight.rows import FAIL, NO_GPU, PASS, SKIP, WARN, Row
from runner.preflight.smi_parse import (  # noqa: F401 - re-exported for callers
    QUERY,
    Gpu,
    SmiReport,
    parse_csv,
    parse_xml,
    report_from_csv,
)

RETIRED_PAGES_LIMIT = 60  # NVIDIA's RMA threshold for retired pages per GPU
HW_SLOWDOWNS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")


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
    cuda = f"CUDA {report.cuda_version}" if report.cuda_version else "CUDA not reported"
    detail = f"driver {report.driver_version}, {cuda}, {len(gpus)} x {model}"
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


def _smi(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=120)


def _first_line(done: subprocess.CompletedProcess) -> str:
    return (done.stdout.strip() or done.stderr.strip() or "failed").splitlines()[0]


def read_report() -> tuple[SmiReport | None, str]:
    """This node's report: from `-q -x`, else from the `--query-gpu` CSV; (None, why)."""
    done = _smi(["-q", "-x"])
    problem = f"nvidia-smi -q -x exited {done.returncode}: {_first_line(done)}"
    if done.returncode == 0:
        try:
            return parse_xml(done.stdout), "xml"
        except ET.ParseError as err:
            problem = f"nvidia-smi -q -x printed invalid XML ({err})"
    done = _smi([f"--query-gpu={','.join(QUERY)}", "--format=csv"])
    if done.returncode == 0:
        try:
            return report_from_csv(done.stdout), "csv"
        except (KeyError, ValueError) as err:
            return None, f"{problem}; --query-gpu output unreadable ({err})"
    return None, f"{problem}; --query-gpu exited {done.returncode}: {_first_line(done)}"


def check(expected_gpus: int | None = None) -> list[Row]:
    """This node's rows; SKIP rows when there is no nvidia-smi (no GPU)."""
    if not shutil.which("nvidia-smi"):
        return [Row(c, SKIP, NO_GPU) for c in CHECKS]
    report, why = read_report()
    if report is None:
        return [Row("nvidia-smi", FAIL, why)]
    return rows(report, expected_gpus)


def main(argv: list[str] | None = None) -> None:
    """Judge nvidia-smi output read from stdin (`--csv` for the --query-gpu table)."""
    text = sys.stdin.read()
    csv = "--csv" in (sys.argv[1:] if argv is None else argv)
    for row in rows(report_from_csv(text) if csv else parse_xml(text)):
        print(f"{row.result}  {row.check}  {row.detail}")


if __name__ == "__main__":
    main()
