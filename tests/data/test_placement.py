"""Direct placement: the layout, the rows, the rebuild, the agreed signature, and batches
that come out the same whichever path their samples took."""

from __future__ import annotations

import threading
from collections import namedtuple
from types import SimpleNamespace

import numpy as np
import pytest

from driver.data import DataPipeline, PipelineConfig, codec
from driver.data.placement import Placed, Placer, layout, rebuild, rows, signature
from driver.data.stages import collate_tree

Pair = namedtuple("Pair", "a b")


def _sample(i: int, kind: str):
    image = np.arange(12, dtype=np.float32).reshape(3, 2, 2) + i
    if kind == "dict":
        return {"image": image, "label": i, "weight": 0.5 * i, "ok": i % 2 == 0}
    if kind == "tuple":
        return (image, np.int16(i))
    if kind == "nested":
        return {"pair": [image, {"id": i}], "mask": np.ones(5, np.bool_)}
    return image  # a bare array


@pytest.mark.parametrize(
    ("sample", "placeable"),
    [
        ({"x": np.zeros(3, np.float32), "y": 1}, True),
        ((np.zeros(2), 1.5, True, np.float16(2)), True),
        ([{"a": np.zeros((2, 2), np.uint8)}], True),
        ({"x": np.zeros(2), "name": "cat"}, False),  # strings are not placed
        ({"x": np.array([1, "a"], dtype=object)}, False),  # nor object arrays
        ({"blob": b"raw bytes"}, False),
        (Pair(np.zeros(2), 1), False),  # nor namedtuples (kept as the collate makes them)
        (None, False),
    ],
)
def test_signature_says_which_samples_can_be_placed(sample, placeable):
    assert (signature(sample) is not None) is placeable


@pytest.mark.parametrize("kind", ["dict", "tuple", "nested", "array"])
def test_placed_rows_decode_to_the_collated_batch(kind):
    count = 5
    samples = [_sample(i, kind) for i in range(count)]
    sig = signature(samples[0])
    spec, nbytes = layout(sig, count)
    buf = np.zeros(nbytes, np.uint8)
    for pos, sample in enumerate(samples):
        for ref, raw in zip(codec.refs(spec), rows(sample), strict=True):
            start = ref.offset + pos * raw.nbytes
            buf[start : start + raw.nbytes] = raw
    placed = codec.decode(spec, buf)
    old_spec, arrays, old_bytes = codec.encode(collate_tree(samples, lazy=True))
    old = np.zeros(old_bytes, np.uint8)
    codec.write(arrays, old_spec, old)
    _same(placed, codec.decode(old_spec, old))
    for pos, sample in enumerate(samples):  # the collator's slow path gets the samples back
        _same(rebuild(sig, buf, count, pos), sample)


def _same(got, want) -> None:
    if isinstance(want, dict):
        assert list(got) == list(want)
        for key in want:
            _same(got[key], want[key])
    elif isinstance(want, list | tuple):
        assert type(got) is type(want) and len(got) == len(want)
        for a, b in zip(got, want, strict=True):
            _same(a, b)
    else:
        assert np.asarray(got).dtype == np.asarray(want).dtype
        assert np.array_equal(np.asarray(got), np.asarray(want))


def _shared(slot_bytes: int = 4096):
    cfg = PipelineConfig(batch_size=4, slot_bytes=slot_bytes, prefetch_batches=2)
    from driver.data.placement import arena_bytes

    buf = bytearray(arena_bytes(cfg))
    return SimpleNamespace(
        config=cfg, shm=SimpleNamespace(buf=memoryview(buf)), layout_lock=threading.Lock(),
        place=True,
    )  # fmt: skip


def test_every_placer_keeps_the_first_recorded_signature():
    shared = _shared()
    first, second = Placer(shared), Placer(shared)
    assert isinstance(first.place(0, 0, 4, {"x": np.ones(3, np.float32)}), Placed)
    assert second.place(1, 2, 4, {"x": np.ones(3, np.float64)}) is None  # staged instead
    assert isinstance(second.place(1, 3, 4, {"x": np.full(3, 7, np.float32)}), Placed)
    view = second.slot_view(1)
    assert np.array_equal(view[36:48].view(np.float32), np.full(3, 7, np.float32))


def test_placer_declines_what_does_not_fit_or_is_not_default_collation():
    shared = _shared(slot_bytes=4096)
    assert Placer(shared).place(0, 0, 4, {"x": np.ones(1100, np.uint8)}) is None  # 4400 B
    shared = _shared()
    shared.place = False  # a custom collate_fn
    assert Placer(shared).place(0, 0, 4, {"x": np.ones(3)}) is None


class MixedDataset:
    """float32 vectors, but every 5th sample is float64; with `names`, each has a name."""

    def __init__(self, names: bool = False):
        self.names = names

    def __len__(self) -> int:
        return 40

    def __getitem__(self, index: int) -> dict:
        dtype = np.float64 if index % 5 == 4 else np.float32
        sample = {"id": index, "x": np.full(3, index, dtype)}
        return {**sample, "name": f"s{index}"} if self.names else sample


@pytest.mark.parametrize(
    ("names", "threads", "start"),
    [(False, 1, "fork"), (True, 1, "fork"), (False, 4, "fork"), (False, 2, "spawn")],
)
def test_batches_are_the_same_whichever_path_their_samples_took(names, threads, start):
    """float64 samples are staged beside placed float32 ones (the collator's slow path
    stacks them as before: float64); with names nothing is placed at all; also with fetch
    threads sharing a producer's placer, and with spawned workers."""
    cfg = PipelineConfig(
        batch_size=8, producers=2, task_size=2, seed=3, prefetch_batches=3, output="numpy",
        fetch_threads=threads, start_method=start,
    )  # fmt: skip
    dataset = MixedDataset(names)
    batches = 0
    with DataPipeline(dataset, cfg) as data:
        for batch in data:
            want = collate_tree([dataset[i] for i in data.last_indices], lazy=False)
            _same(batch, want)
            batches += 1
    assert batches == 5


def test_placed_batches_need_no_collation(monkeypatch):
    """With every sample placeable the collator never encodes a batch: make encoding fail
    (the forked workers inherit the patch) and every batch still arrives, right."""
    from driver.data import collator

    def refuse(tree):
        raise AssertionError("the collator collated a batch that was placed")

    monkeypatch.setattr(collator.codec, "encode", refuse)
    cfg = PipelineConfig(batch_size=8, producers=2, task_size=4, seed=5, fetch_threads=2)
    dataset = FloatDataset()
    with DataPipeline(dataset, cfg) as data:
        for batch in data:
            want = collate_tree([dataset[i] for i in data.last_indices], lazy=False)
            _same({k: v.numpy() for k, v in batch.items()}, want)


class FloatDataset(MixedDataset):
    """MixedDataset with every sample float32 (all placeable)."""

    def __getitem__(self, index: int) -> dict:
        return {"id": index, "x": np.full(3, index, np.float32)}
