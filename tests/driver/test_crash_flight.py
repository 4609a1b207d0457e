"""A crash bundle collects the ranks' flight recorder dumps and analyses them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from driver.output.crash import write_bundle

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "flight-recorder"


def test_bundle_holds_dumps_and_their_analysis(tmp_path):
    dumps = tmp_path / "flight-recorder"
    dumps.mkdir()
    for rank in (0, 2):  # as the NCCL watchdog leaves them on a timeout: pickles
        shutil.copy(FIXTURES / "pickle" / f"rank_{rank}", dumps / f"rank_{rank}")
    snapshot = json.loads((FIXTURES / "json" / "rank_1.json").read_text())
    ranks = {1: {"error": "DistBackendError: timeout", "flight_recorder": snapshot}}
    folder = write_bundle(tmp_path, "", RuntimeError("timeout"), ranks, [])
    summary = json.loads((folder / "summary.json").read_text())
    (group,) = summary["flight_recorder"]["groups"]
    assert summary["flight_recorder"]["ranks"] == [0, 1, 2]
    assert group["never_entered"] == [1, 2] and group["mismatches"][0]["seq"] == 3
    got = sorted(p.name for p in (folder / "flight-recorder").iterdir())
    assert got == ["analysis.txt", "original", "rank_0.json", "rank_1.json", "rank_2.json"]
    assert "never entered by [1, 2]" in (folder / "flight-recorder" / "analysis.txt").read_text()
    assert list(dumps.iterdir()) == []  # moved: the next failure's bundle starts clean
    assert "flight_recorder" not in (folder / "rank-1.txt").read_text()


def test_no_dumps_no_section(tmp_path):
    folder = write_bundle(tmp_path, "", RuntimeError("x"), {}, [])
    assert "flight_recorder" not in json.loads((folder / "summary.json").read_text())
    assert not (folder / "flight-recorder").exists()


def test_an_unreadable_dump_is_reported_not_fatal(tmp_path):
    (tmp_path / "flight-recorder").mkdir()
    (tmp_path / "flight-recorder" / "rank_3").write_bytes(b"\x80\x04garbage")
    folder = write_bundle(tmp_path, "", RuntimeError("x"), {}, [])
    report = json.loads((folder / "summary.json").read_text())["flight_recorder"]
    assert report["ranks"] == [] and "not a flight recorder dump" in report["errors"][0]
