"""The batch codec (shared-memory layout and transport frames) and PipelineConfig checks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from catalog import InputError
from driver.data import PipelineConfig, codec, default_collate


def _tree():
    return {
        "x": np.arange(12, dtype=np.float32).reshape(3, 4),
        "t": torch.arange(6, dtype=torch.bfloat16).reshape(2, 3),
        "meta": ("name", 3, [np.int64(5), b"\x00\x01raw"]),
        "empty": np.zeros((0, 2), np.int16),
    }


def test_encode_write_decode_round_trip():
    spec, arrays, nbytes = codec.encode(_tree())
    assert nbytes % codec.ALIGN == 0
    buf = bytearray(nbytes)
    codec.write(arrays, spec, buf)
    out = codec.decode(spec, np.frombuffer(buf, np.uint8), to_torch=True)
    assert torch.equal(out["x"], torch.arange(12, dtype=torch.float32).reshape(3, 4))
    assert out["t"].dtype == torch.bfloat16 and out["t"].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert out["meta"][0] == "name" and out["meta"][2][1] == b"\x00\x01raw"
    assert tuple(out["empty"].shape) == (0, 2)


def test_decode_returns_views_on_the_buffer():
    spec, arrays, nbytes = codec.encode({"x": np.ones(4, np.int32)})
    base = np.zeros(nbytes, np.uint8)
    codec.write(arrays, spec, base)
    view = codec.decode(spec, base)["x"]
    base[:4] = 0
    assert view[0] == 0 and view.base is not None


def test_frames_round_trip():
    frames = codec.to_frames(_tree())
    out = codec.from_frames([bytes(f) for f in frames])
    assert np.array_equal(out["x"], _tree()["x"])
    assert out["t"].tolist() == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(ValueError, match="frames"):
        codec.from_frames(frames[:1])


@pytest.mark.parametrize(
    ("slot_bytes", "batch", "stride"), [(8192, 4, 2048), (8192, 3, 2688), (4096, 100, 0)]
)
def test_staging_regions_are_aligned_and_disjoint(slot_bytes, batch, stride):
    from driver.data.staging import staging_region

    cfg = PipelineConfig(slot_bytes=slot_bytes, batch_size=batch, prefetch_batches=3)
    regions = [staging_region(cfg, slot, pos) for slot in range(3) for pos in range(batch)]
    assert {size for _, size in regions} == {stride}
    assert all(start % codec.ALIGN == 0 for start, _ in regions)
    ends = sorted((start, start + size) for start, size in regions)
    assert all(a[1] <= b[0] for a, b in zip(ends, ends[1:], strict=False))
    assert ends[0][0] >= 3 * slot_bytes and ends[-1][1] <= 6 * slot_bytes  # after the batches


def test_stack_leaves_are_stacked_into_the_buffer():
    parts = [np.full((2, 3), i, np.float32) for i in range(4)]
    spec, arrays, nbytes = codec.encode({"x": codec.Stack(parts), "n": 7})
    buf = np.zeros(nbytes, np.uint8)
    codec.write(arrays, spec, buf)
    out = codec.decode(spec, buf)
    assert np.array_equal(out["x"], np.stack(parts)) and out["n"] == 7


@pytest.mark.parametrize(
    ("parts", "lazy"),
    [
        ([np.zeros(2, np.float32), np.ones(2, np.float32)], True),
        ([np.zeros(2, np.float32), np.ones(2, np.float64)], False),  # mixed dtypes: np.stack
        ([np.zeros(2), np.ones(3)], None),  # ragged: an error, as with default_collate
    ],
)
def test_lazy_collate_matches_default_collate(parts, lazy):
    from driver.data.stages import collate_tree

    if lazy is None:
        with pytest.raises(ValueError):
            collate_tree(parts, lazy=True)
        return
    tree = collate_tree(parts, lazy=True)
    assert isinstance(tree, codec.Stack) is lazy
    spec, arrays, nbytes = codec.encode(tree)
    buf = np.zeros(nbytes, np.uint8)
    codec.write(arrays, spec, buf)
    expected = default_collate(parts)
    got = codec.decode(spec, buf)
    assert got.dtype == expected.dtype and np.array_equal(got, expected)


@pytest.mark.parametrize(
    ("samples", "expected"),
    [
        ([{"a": 1}, {"a": 2}], {"a": [1, 2]}),
        ([(1, "x"), (2, "y")], ([1, 2], ["x", "y"])),
        ([np.zeros(2), np.ones(2)], [[0, 0], [1, 1]]),
    ],
)
def test_default_collate(samples, expected):
    def plain(node):
        if isinstance(node, dict):
            return {k: plain(v) for k, v in node.items()}
        if isinstance(node, tuple):
            return tuple(plain(v) for v in node)
        return node.tolist() if hasattr(node, "tolist") else node

    assert plain(default_collate(samples)) == expected


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"producers": 0}, "PipelineConfig.producers"),
        ({"prefetch_batches": 1}, "PipelineConfig.prefetch_batches"),
        ({"on_corrupt": "ignore"}, "PipelineConfig.on_corrupt"),
        ({"sample_timeout_s": 0}, "PipelineConfig.sample_timeout_s"),
        ({"batch_size": True}, "PipelineConfig.batch_size"),
        ({"fetch_threads": 0}, "PipelineConfig.fetch_threads"),
        ({"seed": "abc"}, "PipelineConfig.seed"),
        ({"shuffle": "yes"}, "PipelineConfig.shuffle"),
        ({"startup_timeout_s": -1}, "PipelineConfig.startup_timeout_s"),
        ({"poll_interval_s": "fast"}, "PipelineConfig.poll_interval_s"),
    ],
)
def test_config_rejects_bad_values(kwargs, field):
    with pytest.raises(InputError, match=field):
        PipelineConfig(**kwargs)


def test_config_from_dict_names_file_and_key():
    assert PipelineConfig.from_dict({"batch_size": 4}).batch_size == 4
    with pytest.raises(InputError, match=r"^runs/x.yaml: data.batchsize: unknown key$"):
        PipelineConfig.from_dict({"batchsize": 4}, source="runs/x.yaml")
    with pytest.raises(InputError, match=r"^runs/x.yaml: data.collators: must be an integer"):
        PipelineConfig.from_dict({"collators": -1}, source="runs/x.yaml")
    with pytest.raises(InputError, match=r"^runs/x.yaml: loader.seed: must be an integer$"):
        PipelineConfig.from_dict({"seed": "1"}, source="runs/x.yaml", section="loader")
