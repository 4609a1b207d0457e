"""DataPipeline end to end: exact resume, world-size change, back-pressure, slots, spawn."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from driver.data import DataPipeline, PipelineConfig, PipelineError
from driver.data.sampling import epoch_permutation
from tests.data.conftest import IndexDataset, ids_of

CFG = PipelineConfig(batch_size=4, producers=2, collators=1, seed=11, poll_interval_s=0.05)


def _cfg(**kwargs) -> PipelineConfig:
    return PipelineConfig(**{**CFG.__dict__, **kwargs})


def _epoch(size: int, world: int, cfg=CFG) -> list[list[list[int]]]:
    """Batches of ids per rank of one uninterrupted epoch."""
    out = []
    for rank in range(world):
        with DataPipeline(IndexDataset(size), cfg, rank=rank, world_size=world) as data:
            out.append(ids_of(data))
    return out


def test_one_epoch_follows_the_global_schedule():
    ranks = _epoch(50, 2)
    perm = epoch_permutation(11, 0, 50).tolist()
    assert ranks[0][0] == perm[0:4] and ranks[1][0] == perm[4:8] and ranks[0][1] == perm[8:12]
    assert [len(r) for r in ranks] == [6, 6]  # 48 of 50: drop_last
    seen = [i for rank in ranks for batch in rank for i in batch]
    assert len(seen) == len(set(seen)) == 48


def test_batches_are_tensors_with_the_samples():
    with DataPipeline(IndexDataset(8), _cfg(output="torch"), 0, 1) as data:
        batch = next(iter(data))
        assert isinstance(batch["x"], torch.Tensor) and batch["x"].shape == (4, 4)
        assert batch["x"][:, 0].tolist() == batch["id"].tolist()
        assert data.last_indices == batch["id"].tolist()
    with DataPipeline(IndexDataset(8), _cfg(output="numpy"), 0, 1) as data:
        assert isinstance(next(iter(data))["x"], np.ndarray)


def test_epochs_continue_and_differ():
    with DataPipeline(IndexDataset(16), CFG, 0, 1) as data:
        first, second = ids_of(data), ids_of(data)
        assert data.epoch == 2
    assert sorted(sum(first, [])) == sorted(sum(second, [])) == list(range(16))
    assert first != second


@pytest.mark.parametrize("k", [0, 3, 6])
def test_resume_at_step_k_matches_an_uninterrupted_run(k):
    size, world = 60, 2
    full = _epoch(size, world)
    for rank in range(world):
        with DataPipeline(IndexDataset(size), CFG, rank, world) as data:
            before = ids_of(data, steps=k) if k else []
            state = data.state_dict()
        assert state["position"] == k * world * CFG.batch_size
        with DataPipeline(IndexDataset(size), CFG, rank, world) as data:
            data.load_state_dict(state)
            after = ids_of(data)
        mismatches = sum(a != b for a, b in zip(before + after, full[rank], strict=True))
        assert mismatches == 0


@pytest.mark.parametrize(("old", "new", "drop_last"), [(2, 3, False), (3, 1, False), (2, 4, True)])
def test_world_size_change_sees_every_sample_once(old, new, drop_last):
    size, k = 70, 2
    cfg = _cfg(drop_last=drop_last)
    seen, states = [], []
    for rank in range(old):
        with DataPipeline(IndexDataset(size), cfg, rank, old) as data:
            seen += sum(ids_of(data, steps=k), [])
            states.append(data.state_dict())
    assert len({s["position"] for s in states}) == 1
    for rank in range(new):
        with DataPipeline(IndexDataset(size), cfg, rank, new) as data:
            data.load_state_dict(states[0])
            seen += sum(ids_of(data), [])
    assert len(seen) == len(set(seen))
    if drop_last:
        assert size - len(seen) < cfg.batch_size * new
    else:
        assert sorted(seen) == list(range(size))


def test_a_rank_with_no_sample_in_the_last_step_gets_no_batch():
    cfg = _cfg(drop_last=False, batch_timeout_s=20)
    ranks = _epoch(6, 4, cfg)  # 6 samples over 4 ranks of 4: 2, 2, 1, 1
    ranks += _epoch(2, 3, cfg)  # 2 samples over 3 ranks: rank 2 gets nothing
    assert [sum(len(b) for b in r) for r in ranks] == [2, 2, 1, 1, 1, 1, 0]
    assert ranks[-1] == []


def test_resume_after_the_last_batch_starts_the_next_epoch():
    with DataPipeline(IndexDataset(8), CFG, 0, 1) as data:
        ids_of(data, steps=2)
        state = data.state_dict()
    with DataPipeline(IndexDataset(8), CFG, 0, 1) as data:
        data.load_state_dict(state)
        assert ids_of(data) == []
        nxt = ids_of(data)
    assert sorted(sum(nxt, [])) == list(range(8)) and data.epoch == 2


@pytest.mark.parametrize(
    ("change", "message"),
    [({"dataset_len": 9}, "dataset_len"), ({"seed": 1}, "seed"), ({"position": 99}, "outside")],
)
def test_load_rejects_a_state_of_another_schedule(change, message):
    with DataPipeline(IndexDataset(16), CFG, 0, 1) as data:
        state = {**data.state_dict(), **change}
        with pytest.raises(PipelineError, match=message):
            data.load_state_dict(state)


def test_load_rejects_a_state_that_is_not_a_pipeline_state():
    with DataPipeline(IndexDataset(16), CFG, 0, 1) as data:
        with pytest.raises(PipelineError, match="lacks epoch, position"):
            data.load_state_dict({"seed": 11})


def test_state_records_in_flight_batches():
    with DataPipeline(IndexDataset(64), _cfg(prefetch_batches=4), 0, 1) as data:
        it = iter(data)
        next(it)
        deadline = __import__("time").monotonic() + 10
        while not data.state_dict()["in_flight"] and __import__("time").monotonic() < deadline:
            data._receive()
        state = data.state_dict()
    assert state["position"] == 4 and state["in_flight"] and min(state["in_flight"]) >= 1


def test_holding_every_batch_fails_instead_of_hanging():
    with DataPipeline(IndexDataset(64), _cfg(prefetch_batches=2), 0, 1) as data:
        kept = []
        with pytest.raises(PipelineError, match="batch slots are held"):
            for batch in data:
                kept.append(batch)
    assert len(kept) == 2


def test_dropping_batches_lets_a_small_ring_run_a_long_epoch():
    with DataPipeline(IndexDataset(200), _cfg(prefetch_batches=2, work_queue_size=2), 0, 1) as data:
        assert len(ids_of(data)) == 50


def test_batch_larger_than_a_slot_is_a_clear_error():
    class Big(IndexDataset):
        def __getitem__(self, index):
            return {"id": index, "x": np.zeros(4096, np.float32)}

    with DataPipeline(Big(8), _cfg(slot_bytes=8192), 0, 1) as data:
        with pytest.raises(PipelineError, match="PipelineConfig.slot_bytes=8192"):
            next(iter(data))


def test_list_datasets_are_packed_and_stages_run_with_per_sample_seeds():
    records = [{"id": i, "x": np.full(2, i, np.float32)} for i in range(12)]

    def jitter(sample, ctx):
        return {**sample, "noise": ctx.rng().random()}

    from driver.data import FunctionStage

    stage = FunctionStage(jitter, with_context=True)
    runs = []
    for _ in range(2):
        with DataPipeline(records, CFG, 0, 1, stages=[stage]) as data:
            assert type(data.dataset).__name__ == "PackedDataset"
            runs.append([b["noise"].tolist() for b in data])
    assert runs[0] == runs[1]


def test_spawn_start_method():
    with DataPipeline(IndexDataset(12), _cfg(start_method="spawn", producers=1), 0, 1) as data:
        assert sorted(sum(ids_of(data), [])) == list(range(12))


@pytest.mark.parametrize(
    ("task_size", "collators", "threads"), [(1, 2, 1), (3, 1, 1), (64, 2, 1), (5, 1, 4)]
)
def test_task_size_collators_and_threads_do_not_change_the_batches(task_size, collators, threads):
    cfg = _cfg(task_size=task_size, collators=collators, producers=3, fetch_threads=threads)
    assert _epoch(40, 2, cfg) == _epoch(40, 2)


class Ragged(IndexDataset):
    """Sample i holds i × 700 bytes: small ones go through staging, big ones the queue."""

    def __getitem__(self, index):
        return {"id": index, "x": np.full(index * 700, index % 251, np.uint8), "t": torch.ones(2)}


def _sums(samples):
    return {
        "id": np.array([s["id"] for s in samples]),
        "sum": np.array([int(s["x"].sum()) for s in samples]),
        "t": torch.stack([s["t"] for s in samples]),
    }


def test_staged_and_queued_samples_arrive_intact():
    cfg = _cfg(slot_bytes=4 * 8192, shuffle=False)  # 8 KiB of staging per sample: ids < 12
    with DataPipeline(Ragged(24), cfg, 0, 1, collate_fn=_sums) as data:
        for batch in data:
            ids = batch["id"].tolist()
            assert batch["sum"].tolist() == [i * 700 * (i % 251) for i in ids]
            assert batch["t"].tolist() == [[1.0, 1.0]] * 4
