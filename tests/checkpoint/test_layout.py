"""Table tests of the pure rules: layout, commit markers, retention, clean-up, preemption."""

from __future__ import annotations

import pytest

from catalog.errors import InputError
from driver.checkpoint.layout import (
    Marker,
    file_problems,
    join,
    newest_committed,
    parse_step,
    retained,
    run_uri,
    save_due,
    step_dir,
    to_delete,
)
from driver.checkpoint.preemption import (
    MAX_CHECK_GAP,
    check_gap,
    estimate_save_s,
    final_save_decision,
)
from driver.config.checkpoint import CheckpointConfig


@pytest.mark.parametrize(
    "parts, want",
    [
        (("outputs/checkpoints", "team", "run"), "outputs/checkpoints/team/run"),
        (("gs://bucket", "team", "run"), "gs://bucket/team/run"),
        (("gs://bucket/", "/team/", "run"), "gs://bucket/team/run"),
        (("/abs/root", "t", "r", "step-3"), "/abs/root/t/r/step-3"),
        (("memory://b", "t"), "memory://b/t"),
    ],
)
def test_join(parts, want):
    assert join(*parts) == want


@pytest.mark.parametrize("team, run", [("", "r"), ("t", "a/b"), ("..", "r"), ("t", ".")])
def test_run_uri_refuses_path_tricks(team, run):
    with pytest.raises(ValueError):
        run_uri("root", team, run)


@pytest.mark.parametrize(
    "name, want",
    [
        ("step-0", 0),
        ("step-120", 120),
        ("gs://b/t/r/step-7/", 7),
        ("/x/step-12", 12),
        ("step-12.tmp", None),
        ("step-", None),
        ("steps-3", None),
        ("COMMITTED", None),
    ],
)
def test_parse_step(name, want):
    assert parse_step(name) == want


def test_step_dir_roundtrip():
    assert parse_step(step_dir(42)) == 42
    with pytest.raises(ValueError):
        step_dir(-1)


@pytest.mark.parametrize(
    "steps, want",
    [
        ({}, None),
        ({5: False}, None),
        ({5: True, 10: False}, 5),
        ({5: True, 10: True, 15: False}, 10),
    ],
)
def test_newest_committed_ignores_uncommitted(steps, want):
    assert newest_committed(steps) == want


@pytest.mark.parametrize(
    "committed, keep_last, keep_every, want",
    [
        ([1, 2, 3, 4, 5], 2, 0, {4, 5}),
        ([1, 2, 3, 4, 5], 0, 0, {1, 2, 3, 4, 5}),
        ([100, 200, 300, 400, 500], 1, 200, {200, 400, 500}),
        ([100, 200, 300], 5, 0, {100, 200, 300}),
        ([], 3, 10, set()),
    ],
)
def test_retained(committed, keep_last, keep_every, want):
    assert retained(committed, keep_last, keep_every) == want


@pytest.mark.parametrize(
    "steps, keep_last, keep_every, in_flight, startup, want",
    [
        # retention of committed checkpoints
        ({1: True, 2: True, 3: True}, 2, 0, set(), False, [1]),
        ({10: True, 20: True, 30: True, 40: True}, 1, 20, set(), False, [10, 30]),
        # partial (uncommitted) directories older than the newest committed go
        ({1: True, 2: False, 3: True}, 5, 0, set(), False, [2]),
        # a newer uncommitted one may be in flight: kept while running ...
        ({1: True, 2: False}, 5, 0, set(), False, []),
        # ... and removed at start-up, when no writer of the run is alive
        ({1: True, 2: False}, 5, 0, set(), True, [2]),
        ({2: False}, 5, 0, set(), True, [2]),
        # never touch what is being written now
        ({1: True, 2: True, 3: False}, 1, 0, {3}, True, [1]),
    ],
)
def test_to_delete(steps, keep_last, keep_every, in_flight, startup, want):
    assert to_delete(steps, keep_last, keep_every, in_flight, startup) == want


@pytest.mark.parametrize(
    "step, interval, last, want",
    [
        (0, 5, None, False),
        (5, 5, None, True),
        (5, 5, 5, False),
        (6, 5, None, False),
        (7, 0, None, False),
    ],
)
def test_save_due(step, interval, last, want):
    assert save_due(step, interval, last) is want


def test_marker_roundtrip():
    marker = Marker(
        step=9, world_size=2, files={".metadata": 10, "__0_0.distcp": 99}, write_s=1.5, created=1.0
    )
    assert Marker.loads(marker.dumps()) == marker


@pytest.mark.parametrize(
    "expected, found, want",
    [
        ({"a": 1}, {"a": 1, "b": 3}, []),
        ({"a": 10}, {"a": 4}, ["a has 4 bytes, 10 when committed"]),
        ({"a": 1, ".metadata": 5}, {"a": 1}, [".metadata is missing"]),
    ],
)
def test_file_problems(expected, found, want):
    assert file_problems(expected, found) == want


@pytest.mark.parametrize(
    "remaining, estimate, step, last, want",
    [
        (20.0, 5.0, 10, 8, True),
        (20.0, 30.0, 10, 8, False),
        (20.0, None, 10, 8, True),
        (0.0, 1.0, 10, 8, False),
        (20.0, 1.0, 10, 10, False),
    ],
)
def test_final_save_decision(remaining, estimate, step, last, want):
    ok, why = final_save_decision(remaining, estimate, step, last)
    assert ok is want and why


def test_estimate_uses_recent_slowest():
    assert estimate_save_s([]) is None
    assert estimate_save_s([100.0, 1, 2, 3, 4, 2], margin=1.0) == 4
    assert estimate_save_s([2.0], margin=1.5) == 3.0


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"keep_last": -1}, "checkpoint.keep_last"),
        ({"interval_steps": 1.5}, "checkpoint.interval_steps"),
        ({"async_mode": "later"}, "checkpoint.async_mode"),
        ({"writer_threads": 0}, "checkpoint.writer_threads"),
        ({"preemption_budget_s": -3}, "checkpoint.preemption_budget_s"),
        ({"root": ""}, "checkpoint.root"),
    ],
)
def test_config_errors_name_the_field(overrides, field):
    with pytest.raises(InputError) as err:
        CheckpointConfig(**overrides)
    assert err.value.field == field and "\n" not in str(err.value)


def test_config_from_dict_rejects_unknown_keys():
    cfg = CheckpointConfig.from_dict({"root": "gs://b", "keep_last": 2}, source="run.yaml")
    assert (cfg.root, cfg.keep_last, cfg.resume) == ("gs://b", 2, "auto")
    with pytest.raises(InputError, match="run.yaml: checkpoint.keep_lats: unknown key"):
        CheckpointConfig.from_dict({"keep_lats": 2}, source="run.yaml")


def test_every_config_key_is_documented():
    from dataclasses import fields
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "checkpoint.md").read_text()
    missing = [f.name for f in fields(CheckpointConfig) if f"| `{f.name}` |" not in doc]
    assert missing == []


@pytest.mark.parametrize(
    ("elapsed_s", "steps", "every_s", "gap"),
    [
        (0.5, 10, 1.0, 20),  # 50 ms steps: agree every 20 steps
        (20.0, 2, 1.0, 1),  # 10 s steps: after every step
        (1.0, 10, 0.0, 1),  # 0: after every step
        (0.0, 0, 1.0, 1),  # nothing measured yet
        (0.0, 5, 1.0, MAX_CHECK_GAP),  # too fast to measure
        (0.001, 100, 10.0, MAX_CHECK_GAP),  # capped
    ],
)
def test_check_gap(elapsed_s, steps, every_s, gap):
    assert check_gap(elapsed_s, steps, every_s) == gap


def test_yielding_stream_writes_in_pieces_and_delegates_the_rest(tmp_path):
    import io

    from driver.checkpoint.storage import YieldingStream

    class Recording(io.BytesIO):
        def __init__(self):
            super().__init__()
            self.sizes: list[int] = []

        def write(self, data):
            self.sizes.append(len(data))
            return super().write(data)

    raw = Recording()
    stream = YieldingStream(raw, chunk=4)
    assert stream.write(b"0123456789") == 10
    assert raw.sizes == [4, 4, 2] and stream.tell() == 10 and raw.getvalue() == b"0123456789"
    assert stream.write(memoryview(bytearray(3))) == 3 and raw.sizes[-1] == 3
