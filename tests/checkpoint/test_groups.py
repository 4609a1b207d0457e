"""The checkpoint layer's process groups: no extra gloo group (and its loop thread, which
wakes every 10 ms) on a gloo run until the first save; one shared companion under nccl."""

from __future__ import annotations

import torch
import torch.multiprocessing as mp

from tests.checkpoint.ranks import groups_rank
from tests.checkpoint.test_reshard import free_port


def test_gloo_run_adds_one_writer_group_at_the_first_save_only(tmp_path):
    args = (2, free_port(), str(tmp_path / "ckpt"), str(tmp_path), "groups", "")
    mp.spawn(groups_rank, args=args, nprocs=2, join=True)
    for rank in (0, 1):
        counts = torch.load(tmp_path / f"groups-{rank}.pt")
        base = counts["init"]
        assert base >= 1
        assert counts["built"] == base  # checkpointer and guard share the default group
        assert counts["save1"] == base + 1  # the background writer's own group
        assert counts["save2"] == base + 1  # made once
        assert counts["companion"] == base + 2 and counts["same"]
