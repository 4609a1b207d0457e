"""nvidia-smi parsers on recorded `-q -x` XML and `--query-gpu` CSV."""

from __future__ import annotations

import subprocess

import pytest

from runner.preflight import nvsmi
from runner.preflight.rows import FAIL, PASS, WARN
from tests.preflight.conftest import fixture_text


@pytest.fixture(scope="module")
def faulty() -> nvsmi.SmiReport:
    return nvsmi.parse_xml(fixture_text("nvidia-smi", "q-x-h100-faulty.xml"))


@pytest.fixture(scope="module")
def healthy() -> nvsmi.SmiReport:
    return nvsmi.parse_xml(fixture_text("nvidia-smi", "q-x-h200-healthy.xml"))


def test_versions_and_gpus(faulty, healthy):
    assert (faulty.driver_version, faulty.cuda_version, len(faulty.gpus)) == (
        "550.90.07",
        "12.4",
        8,
    )
    assert (healthy.driver_version, healthy.cuda_version) == ("570.133.20", "12.8")
    gpu = faulty.gpus[3]
    assert gpu.bus_id == "00000000:0B:00.0"
    assert gpu.name == "NVIDIA H100 80GB HBM3"
    assert (gpu.volatile_uncorrectable, gpu.volatile_correctable) == (2, 14)
    assert (gpu.remap_pending, gpu.remap_failure) == (True, False)
    assert gpu.retired_count is None and gpu.retired_pending is None
    assert faulty.gpus[5].active_reasons == ["gpu_idle", "hw_slowdown"]
    assert (faulty.gpus[5].sm_clock, faulty.gpus[5].max_sm_clock) == (1095, 1980)


def test_faulty_node_rows(faulty):
    rows = {r.check: r for r in nvsmi.rows(faulty, expected_gpus=8)}
    assert rows["nvidia-smi"].result == PASS
    assert rows["nvidia-smi"].data == {
        "driver_version": "550.90.07",
        "cuda_version": "12.4",
        "gpus": 8,
    }
    assert rows["ecc"].result == FAIL and "GPU3 (00000000:0B:00.0)" in rows["ecc"].detail
    assert rows["remapped-rows"].result == FAIL and "GPU3" in rows["remapped-rows"].detail
    assert rows["clocks"].result == FAIL and "GPU5 1095/1980 MHz" in rows["clocks"].detail
    assert rows["retired-pages"].result == PASS
    assert rows["persistence"].result == PASS


def test_healthy_node_passes(healthy):
    assert {r.result for r in nvsmi.rows(healthy, expected_gpus=8)} == {PASS}


def test_missing_gpus_fail(healthy):
    row = nvsmi.rows(healthy, expected_gpus=16)[0]
    assert row.result == FAIL and "expected 16 GPUs" in row.detail


def test_pre_535_throttle_reason_tags():
    text = fixture_text("nvidia-smi", "q-x-h100-faulty.xml").replace(
        "clocks_event_reason", "clocks_throttle_reason"
    )
    assert nvsmi.parse_xml(text).gpus[5].active_reasons == ["gpu_idle", "hw_slowdown"]


def test_retired_pages_when_reported():
    text = fixture_text("nvidia-smi", "q-x-h200-healthy.xml")
    first = text.index("<retired_count>N/A</retired_count>")
    text = text[:first] + "<retired_count>3</retired_count>" + text[first + 34 :]
    text = text.replace(
        "<pending_retirement>N/A</pending_retirement>",
        "<pending_retirement>No</pending_retirement>",
        1,
    )
    report = nvsmi.parse_xml(text)
    assert report.gpus[0].retired_count == 3
    row = {r.check: r for r in nvsmi.rows(report)}["retired-pages"]
    assert row.result == WARN and "GPU0" in row.detail


def test_persistence_disabled_warns(healthy):
    text = fixture_text("nvidia-smi", "q-x-h200-healthy.xml").replace(
        "<persistence_mode>Enabled</persistence_mode>",
        "<persistence_mode>Disabled</persistence_mode>",
        1,
    )
    row = {r.check: r for r in nvsmi.rows(nvsmi.parse_xml(text))}["persistence"]
    assert row.result == WARN and "GPU0" in row.detail


def test_query_gpu_csv_cells():
    rows = nvsmi.parse_csv(fixture_text("nvidia-smi", "query-gpu-h100.csv"))
    assert len(rows) == 8
    assert rows[3]["ecc.errors.uncorrected.volatile.total"] == "2"
    assert rows[3]["remapped_rows.pending"] == "Yes"
    assert rows[5]["clocks.current.sm"] == "1095"  # "1095 MHz" under "clocks.current.sm [MHz]"
    assert rows[5]["clocks_event_reasons.hw_slowdown"] == "Active"
    assert rows[0]["retired_pages.pending"] is None  # [N/A]
    assert rows[0]["driver_version"] == "550.90.07"
    assert list(rows[0]) == nvsmi.QUERY


def test_csv_and_xml_of_one_node_give_the_same_verdicts(faulty):
    from_csv = nvsmi.report_from_csv(fixture_text("nvidia-smi", "query-gpu-h100.csv"))
    assert from_csv.cuda_version is None  # the query has no CUDA version
    xml_rows = [(r.check, r.result, r.detail) for r in nvsmi.rows(faulty, 8)[1:]]
    csv_rows = [(r.check, r.result, r.detail) for r in nvsmi.rows(from_csv, 8)[1:]]
    assert csv_rows == xml_rows
    assert nvsmi.rows(from_csv, 8)[0].detail == (
        "driver 550.90.07, CUDA not reported, 8 x NVIDIA H100 80GB HBM3"
    )


def test_csv_persistence_and_retired_pages():
    text = fixture_text("nvidia-smi", "query-gpu-h100.csv").splitlines()
    text[7] = (
        text[7]
        .replace("Enabled, Enabled", "Disabled, Enabled")
        .replace("[N/A], [N/A], [N/A]", "61, 0, No")
    )
    rows = {r.check: r for r in nvsmi.rows(nvsmi.report_from_csv("\n".join(text)))}
    assert rows["persistence"].result == WARN and "GPU6" in rows["persistence"].detail
    assert rows["retired-pages"].result == FAIL and "60+ retired pages: GPU6" in (
        rows["retired-pages"].detail
    )


def smi(answers: dict[str, tuple[int, str]]):
    """Stand-in for nvidia-smi: (exit status, stdout) by the first argument."""

    def run(args):
        code, out = answers[args[0].split("=")[0]]
        return subprocess.CompletedProcess(["nvidia-smi", *args], code, out, "")

    return run


@pytest.mark.parametrize(
    ("xml", "csv", "result", "detail"),
    [
        ("q-x-h200-healthy.xml", None, PASS, "driver 570.133.20, CUDA 12.8"),
        ("<nvidia_smi_log><gpu", "query-gpu-h100.csv", PASS, "driver 550.90.07, CUDA not"),
        (None, "query-gpu-h100.csv", PASS, "driver 550.90.07, CUDA not"),
        (None, None, FAIL, "nvidia-smi -q -x exited 9: No devices were found; --query-gpu"),
    ],
)
def test_check_reads_xml_else_csv(monkeypatch, xml, csv, result, detail):
    def answer(name):
        if name is None:
            return (9, "No devices were found")
        return (0, fixture_text("nvidia-smi", name) if name.endswith((".xml", ".csv")) else name)

    monkeypatch.setattr(nvsmi.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(nvsmi, "_smi", smi({"-q": answer(xml), "--query-gpu": answer(csv)}))
    first = nvsmi.check(8)[0]
    assert first.check == "nvidia-smi" and first.result == result
    assert first.detail.startswith(detail)


def test_no_nvidia_smi_skips(monkeypatch):
    monkeypatch.setattr(nvsmi.shutil, "which", lambda name: None)
    rows = nvsmi.check()
    assert [r.check for r in rows] == nvsmi.CHECKS
    assert {(r.result, r.detail) for r in rows} == {("SKIP", "no GPU")}
