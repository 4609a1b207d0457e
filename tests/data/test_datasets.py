"""Datasets: packed objects, files through fsspec (local, memory://), WebDataset shards."""

from __future__ import annotations

import pickle

import fsspec
import numpy as np
import pytest

from driver.data import (
    DataPipeline,
    FileDataset,
    PackedDataset,
    PackedStrings,
    PipelineConfig,
    ShardedDataset,
    as_map_dataset,
    write_shards,
)
from driver.data.shards import INDEX_SUFFIX

CFG = PipelineConfig(batch_size=3, producers=2, seed=2, poll_interval_s=0.05, drop_last=False)


def test_packed_dataset_round_trips_and_pickles():
    items = [{"id": i, "text": "x" * i} for i in range(50)] + [None, ("a", 1.5)]
    ds = PackedDataset.from_items(items)
    assert len(ds) == 52 and [ds[i] for i in range(52)] == items
    assert pickle.loads(pickle.dumps(ds))[10] == items[10]
    strings = PackedStrings.from_items(["ä", "", "gs://b/k"])
    assert [strings[i] for i in range(3)] == ["ä", "", "gs://b/k"]


def test_as_map_dataset_adapts_and_rejects():
    assert isinstance(as_map_dataset([1, 2]), PackedDataset)
    assert as_map_dataset([1, 2], pack=False) == [1, 2]
    with pytest.raises(TypeError, match="needs __len__ and __getitem__"):
        as_map_dataset(iter([1, 2]))


def _write_files(root: str, count: int) -> None:
    for i in range(count):
        with fsspec.open(f"{root}/f{i:03d}.bin", "wb") as handle:
            handle.write(np.full(8, i, np.uint8).tobytes())


@pytest.mark.parametrize("where", ["local", "memory"])
def test_file_dataset_through_the_pipeline(where, tmp_path):
    root = str(tmp_path) if where == "local" else f"memory://files-{id(tmp_path)}"
    _write_files(root, 10)
    ds = FileDataset.glob(f"{root}/*.bin", decode=lambda b: np.frombuffer(b, np.uint8))
    assert len(ds) == 10 and ds[3]["data"].tolist() == [3] * 8
    with DataPipeline(ds, CFG, 0, 1) as data:
        seen = [int(v) for batch in data for v in batch["data"][:, 0]]
        assert sorted(seen) == list(range(10))


def test_file_dataset_glob_without_matches(tmp_path):
    with pytest.raises(FileNotFoundError, match="no files match"):
        FileDataset.glob(f"{tmp_path}/*.none")


def _records(count: int):
    for i in range(count):
        yield {"__key__": f"s{i:05d}", "cls": str(i).encode(), "npy": np.full(3, i, np.int32)}


@pytest.mark.parametrize("where", ["local", "memory"])
def test_shards_round_trip_and_feed_the_pipeline(where, tmp_path):
    root = str(tmp_path) if where == "local" else f"memory://shards-{id(tmp_path)}"
    urls = write_shards(_records(23), f"{root}/shard-%04d.tar", samples_per_shard=10)
    assert len(urls) == 3

    def decode(sample):
        return {"id": int(sample["cls"]), "key": sample["__key__"]}

    ds = ShardedDataset(urls, decode=decode)
    assert len(ds) == 23 and ds[17] == {"id": 17, "key": "s00017"}
    with pytest.raises(IndexError):
        ds[23]
    with DataPipeline(ds, CFG, 1, 2) as data:
        mine = [i for batch in data for i in batch["id"].tolist()]
    with DataPipeline(ds, CFG, 0, 2) as data:
        other = [i for batch in data for i in batch["id"].tolist()]
    assert sorted(mine + other) == list(range(23))


def test_shards_are_plain_webdataset_tars(tmp_path):
    import webdataset as wds

    urls = write_shards(_records(12), f"{tmp_path}/w-%02d.tar", samples_per_shard=5)
    read = list(wds.WebDataset(urls, shardshuffle=False))
    ours = ShardedDataset(urls)
    assert [s["__key__"] for s in read] == [ours[i]["__key__"] for i in range(12)]
    assert [s["cls"] for s in read] == [ours[i]["cls"] for i in range(12)]
    assert np.load(__import__("io").BytesIO(ours[11]["npy"])).tolist() == [11, 11, 11]


def test_shards_written_by_webdataset_are_scanned(tmp_path):
    import webdataset as wds

    with wds.TarWriter(str(tmp_path / "plain.tar")) as sink:
        for record in _records(4):
            sink.write(record)
    ds = ShardedDataset([str(tmp_path / "plain.tar")])  # no sidecar index: scans the headers
    assert len(ds) == 4 and ds[2]["cls"] == b"2" and ds[3]["__key__"] == "s00003"


def test_shards_without_index_are_scanned(tmp_path):
    urls = write_shards(_records(5), f"{tmp_path}/s-%02d.tar", samples_per_shard=5)
    (tmp_path / ("s-00.tar" + INDEX_SUFFIX)).unlink()
    ds = ShardedDataset(urls)
    assert len(ds) == 5 and ds[4]["cls"] == b"4" and ds[4]["__key__"] == "s00004"


def test_reference_workload_datasets_flow_through_the_pipeline():
    from driver.workloads.shapes import ShapesDataset
    from driver.workloads.text import TextDataset

    text = TextDataset(size=12, seq_len=8, seed=0)
    with DataPipeline(text, CFG, 0, 1) as data:
        inputs, targets = next(iter(data))
        assert tuple(inputs.shape) == (3, 8) and inputs.dtype.is_floating_point is False
        i = data.last_indices[0]
        assert inputs[0].tolist() == text[i][0].tolist()
    shapes = ShapesDataset(size=6, image_size=8, channels=3, seed=0)
    with DataPipeline(shapes, CFG, 0, 1) as data:
        batch = next(iter(data))
        assert batch[0].numpy().tolist() == shapes[data.last_indices[0]].tolist()
