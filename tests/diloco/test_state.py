"""The synchronizer's outer state on disk: round trip, damaged files, rounds log."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from driver.diloco import state


def make() -> state.OuterState:
    g = torch.Generator().manual_seed(0)
    shared = {"a": torch.randn(3, 4, generator=g), "b": torch.randn(5, generator=g)}
    return state.OuterState(
        7, shared, {k: v * 0.1 for k, v in shared.items()}, {k: v + 1 for k, v in shared.items()},
        {"learners": ["a", "b"]},
    )  # fmt: skip


def test_round_trip(tmp_path):
    saved = make()
    state.save(tmp_path, saved)
    loaded = state.load(tmp_path)
    assert loaded.round == 7 and loaded.meta == {"learners": ["a", "b"]}
    for part in ("shared", "momentum", "view"):
        for k, v in getattr(saved, part).items():
            assert torch.equal(getattr(loaded, part)[k], v)
    assert not list(tmp_path.glob(".*.tmp"))


def test_no_state_is_none_and_not_pickle(tmp_path):
    assert state.load(tmp_path) is None
    path = Path(state.save(tmp_path, make()))
    data = path.read_bytes()
    assert data.startswith(state.MAGIC) and b"\x80\x04" not in data[: len(state.MAGIC) + 2]


@pytest.mark.parametrize("damage", ["magic", "truncate", "garbage"])
def test_damaged_files_are_refused(tmp_path, damage):
    path = Path(state.save(tmp_path, make()))
    data = path.read_bytes()
    if damage == "magic":
        data = b"x" + data[1:]
    elif damage == "truncate":
        data = data[:-10]
    else:
        pos = len(state.MAGIC) + 8
        data = data[:pos] + b"{not json" + data[pos + 9 :]
    path.write_bytes(data)
    with pytest.raises(ValueError):
        state.load(tmp_path)


def test_rounds_log(tmp_path):
    state.append_round(tmp_path, {"round": 1, "contributors": ["a"]})
    state.append_round(tmp_path, {"round": 2, "contributors": ["a", "b"]})
    assert [r["round"] for r in state.read_rounds(tmp_path)] == [1, 2]


def test_state_in_an_object_store(tmp_path):
    folder = f"memory://diloco-test-{tmp_path.name}/run/synchronizer"
    assert state.load(folder) is None
    state.save(folder, make())
    assert state.load(folder).round == 7
    state.append_round(folder, {"round": 8})
    state.append_round(folder, {"round": 9})
    assert [r["round"] for r in state.read_rounds(folder)] == [8, 9]
