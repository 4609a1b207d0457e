"""Map-style datasets for the pipeline: packed in-memory objects, files via fsspec, adapters.

Any object with `__len__` and `__getitem__(int)` is a dataset (`as_map_dataset` checks it).
A plain list of Python objects is packed (`PackedDataset`) so that forked workers reading
it do not touch a million reference counts and copy the pages ("copy-on-read").

    ds = PackedDataset.from_items(records)                       # one byte buffer + offsets
    ds = FileDataset.glob("gs://bucket/images/*.jpg", decode=load_jpeg)
    ds = FileDataset(["memory://a.bin", "memory://b.bin"])
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np


class PackedDataset:
    """Items pickled into one numpy byte buffer with an offsets array (no per-item objects)."""

    def __init__(self, data: np.ndarray, offsets: np.ndarray):
        if offsets.ndim != 1 or len(offsets) < 1 or offsets[-1] != len(data):
            raise ValueError("offsets must start at 0 and end at the buffer's length")
        self.data = data
        self.offsets = offsets

    @classmethod
    def from_items(cls, items: Iterable[Any]) -> PackedDataset:
        """Pickle every item of `items` (any iterable) into one buffer."""
        chunks = [pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL) for item in items]
        return cls._join(chunks)

    @classmethod
    def _join(cls, chunks: Sequence[bytes]) -> PackedDataset:
        offsets = np.zeros(len(chunks) + 1, dtype=np.int64)
        np.cumsum([len(c) for c in chunks], out=offsets[1:])
        data = np.frombuffer(b"".join(chunks), dtype=np.uint8)
        return cls(data, offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index: int) -> Any:
        start, stop = self.offsets[index], self.offsets[index + 1]
        return pickle.loads(self.data[start:stop])


class PackedStrings(PackedDataset):
    """A packed list of strings (UTF-8, no pickling): e.g. a million file URLs."""

    @classmethod
    def from_items(cls, items: Iterable[str]) -> PackedStrings:
        return cls._join([item.encode() for item in items])

    def __getitem__(self, index: int) -> str:
        start, stop = self.offsets[index], self.offsets[index + 1]
        return self.data[start:stop].tobytes().decode()


def as_map_dataset(dataset: Any, pack: bool = True) -> Any:
    """Check that `dataset` is map-style; pack a plain list/tuple when `pack` is set."""
    if isinstance(dataset, list | tuple) and pack:
        return PackedDataset.from_items(dataset)
    if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
        raise TypeError(
            f"{type(dataset).__name__} is not a map-style dataset: it needs __len__ and "
            "__getitem__(index)"
        )
    return dataset


class FileDataset:
    """One sample per file, local or remote (gs://, memory://, ...) through fsspec.

    A sample is `{"url": url, "data": decode(bytes)}` (`decode` defaults to raw bytes).
    URLs are held packed; the filesystem is opened lazily in each process (fork-safe).
    """

    def __init__(
        self,
        urls: Sequence[str],
        decode: Callable[[bytes], Any] | None = None,
        storage_options: dict[str, Any] | None = None,
    ):
        self.urls = urls if isinstance(urls, PackedStrings) else PackedStrings.from_items(urls)
        self.decode = decode
        self.storage_options = dict(storage_options or {})
        self._fs: tuple[int, Any] | None = None

    @classmethod
    def glob(cls, pattern: str, **kwargs: Any) -> FileDataset:
        """All files matching `pattern` (e.g. "gs://bucket/train/*.jpg"), sorted."""
        import fsspec

        fs, _ = fsspec.core.url_to_fs(pattern, **kwargs.get("storage_options", {}) or {})
        paths = sorted(fs.glob(pattern))
        if not paths:
            raise FileNotFoundError(f"no files match {pattern}")
        return cls([fs.unstrip_protocol(p) for p in paths], **kwargs)

    def __len__(self) -> int:
        return len(self.urls)

    def __getitem__(self, index: int) -> dict[str, Any]:
        url = self.urls[index]
        fs = self._filesystem(url)
        with fs.open(url, "rb") as handle:
            data = handle.read()
        return {"url": url, "data": self.decode(data) if self.decode else data}

    def _filesystem(self, url: str) -> Any:
        if self._fs is None or self._fs[0] != os.getpid():
            import fsspec

            fs, _ = fsspec.core.url_to_fs(url, **self.storage_options)
            self._fs = (os.getpid(), fs)
        return self._fs[1]

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_fs": None}
