"""The checkpoint layer's process groups: no extra gloo group (and its loop thread, which
wakes every 10 ms) on a gloo run until the first save; one shared companion under nccl."""

from __future__ import annotations

import pytest
import torch
import torch.multiprocessing as mp

from tests.checkpoint.ranks import groups_rank
from tests.checkpoint.test_reshard import free_port


@pytest.mark.parametrize(
    ("tag", "built", "saved"),
    [
        ("gloo", 0, 1),  # checkpointer and guard use the default group; the writer its own
        ("nccl", 1, 2),  # one gloo companion shared by both, then the writer's group
    ],
)
def test_checkpoint_groups(tmp_path, tag, built, saved):
    args = (2, free_port(), str(tmp_path / "ckpt"), str(tmp_path), tag, "")
    mp.spawn(groups_rank, args=args, nprocs=2, join=True)
    for rank in (0, 1):
        counts = torch.load(tmp_path / f"{tag}-{rank}.pt")
        base = counts["init"]
        assert base >= 1
        assert counts["built"] == base + built
        assert counts["save1"] == base + saved  # the background writer's group, at the first save
        assert counts["save2"] == counts["again"] == base + saved  # made once
        assert counts["same"]
