"""Sharded corpora in the WebDataset format (tar shards), read with random access.

Shards are plain WebDataset tar files (written with `webdataset.TarWriter`, readable by any
WebDataset tool). For deterministic, resumable sampling the pipeline needs map-style access,
so each shard gets a sidecar index `<shard>.idx.json` (sample key → member offsets) written
with the shard, or built by scanning the tar headers when missing.

    urls = write_shards(samples, "gs://bucket/corpus/shard-%06d.tar", samples_per_shard=1000)
    ds = ShardedDataset(urls)            # ds[i] == {"__key__": ..., "jpg": b"...", ...}
"""

from __future__ import annotations

import json
import os
import tarfile
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from driver.data.datasets import PackedDataset, PackedStrings

INDEX_SUFFIX = ".idx.json"


def write_shards(
    samples: Iterable[dict[str, Any]],
    pattern: str,
    samples_per_shard: int,
    storage_options: dict[str, Any] | None = None,
) -> list[str]:
    """Write WebDataset shards named `pattern % shard_number` plus their indexes."""
    import fsspec
    import webdataset as wds

    if samples_per_shard < 1:
        raise ValueError("samples_per_shard must be ≥ 1")
    urls: list[str] = []
    batch: list[dict[str, Any]] = []
    for sample in samples:
        batch.append(sample)
        if len(batch) == samples_per_shard:
            urls.append(_write_one(batch, pattern % len(urls), storage_options, fsspec, wds))
            batch = []
    if batch:
        urls.append(_write_one(batch, pattern % len(urls), storage_options, fsspec, wds))
    return urls


def _write_one(batch: list, url: str, options: Any, fsspec: Any, wds: Any) -> str:
    with fsspec.open(url, "wb", **(options or {})) as handle:
        writer = wds.TarWriter(handle)
        for sample in batch:
            writer.write(sample)
        writer.close()
    index = scan_shard(url, options)
    with fsspec.open(url + INDEX_SUFFIX, "w", **(options or {})) as handle:
        json.dump(index, handle)
    return url


def scan_shard(url: str, storage_options: dict[str, Any] | None = None) -> list:
    """Index of one shard: [[key, {ext: [offset, size], ...}], ...] in tar order."""
    import fsspec
    from webdataset.tariterators import base_plus_ext

    samples: dict[str, dict[str, list[int]]] = {}
    with fsspec.open(url, "rb", **(storage_options or {})) as handle:
        with tarfile.open(fileobj=handle, mode="r:") as tar:
            for member in tar:
                if not member.isfile():
                    continue
                key, ext = base_plus_ext(member.name)
                if key is None or ext is None:
                    continue
                samples.setdefault(key, {})[ext] = [member.offset_data, member.size]
    return [[key, members] for key, members in samples.items()]


class ShardedDataset:
    """Map-style view of WebDataset shards: sample i → {"__key__": key, ext: bytes, ...}."""

    def __init__(
        self,
        urls: Sequence[str],
        decode: Callable[[dict[str, Any]], Any] | None = None,
        storage_options: dict[str, Any] | None = None,
    ):
        if not urls:
            raise ValueError("ShardedDataset needs at least one shard")
        self.options = dict(storage_options or {})
        self.decode = decode
        self.urls = PackedStrings.from_items(urls)
        indexes = [self._load_index(url) for url in urls]
        self.counts = np.cumsum([0, *(len(index) for index in indexes)]).astype(np.int64)
        self.entries = PackedDataset.from_items(entry for index in indexes for entry in index)
        self._open: dict[int, tuple[int, int, Any]] = {}  # thread id → (pid, shard, file)

    def _load_index(self, url: str) -> list:
        import fsspec

        fs, path = fsspec.core.url_to_fs(url + INDEX_SUFFIX, **self.options)
        if fs.exists(path):
            with fs.open(path, "r") as handle:
                return json.load(handle)
        return scan_shard(url, self.options)

    def __len__(self) -> int:
        return int(self.counts[-1])

    def __getitem__(self, index: int) -> Any:
        if not 0 <= index < len(self):
            raise IndexError(f"sample {index} outside 0..{len(self) - 1}")
        shard = int(np.searchsorted(self.counts, index, side="right")) - 1
        key, members = self.entries[index]
        handle = self._handle(shard)
        sample: dict[str, Any] = {"__key__": key, "__shard__": self.urls[shard]}
        for ext, (offset, size) in members.items():
            handle.seek(offset)
            sample[ext] = handle.read(size)
        return self.decode(sample) if self.decode else sample

    def _handle(self, shard: int) -> Any:
        """This thread's open file of `shard` (one per thread: fetch threads seek at once)."""
        pid, thread = os.getpid(), threading.get_ident()
        current = self._open.get(thread)
        if current is None or current[:2] != (pid, shard):
            import fsspec

            if current is not None and current[0] == pid:
                current[2].close()
            current = (pid, shard, fsspec.open(self.urls[shard], "rb", **self.options).open())
            self._open[thread] = current
        return current[2]

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_open": {}}
