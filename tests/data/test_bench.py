"""The data benchmark's pure pieces: the process split and the CPU floor of a dataset."""

from __future__ import annotations

import pytest

from tests.benches import load_bench


@pytest.fixture(scope="module")
def bench():
    return load_bench("data_bench")


@pytest.mark.parametrize(("workers", "collators", "producers"), [(4, 1, 3), (2, 1, 1), (8, 2, 6)])
def test_split_counts_the_collators(bench, workers, collators, producers):
    assert bench.split(workers, collators) == producers


def test_floor_times_getitem_alone(bench):
    images = bench.Images(8, side=8, cost=2)
    assert images[3]["image"].shape == (3, 8, 8) and images[3]["label"] == 3
    assert bench.floor_ms(images, heap=False, count=8) > 0
    assert bench.floor_ms(images, heap=True, count=8) > 0


def test_rejects_too_few_samples_for_the_warmup(bench, capsys):
    with pytest.raises(SystemExit) as caught:
        bench.main(["--large-samples", "10"])
    assert caught.value.code == 2 and "--large-samples" in capsys.readouterr().err
