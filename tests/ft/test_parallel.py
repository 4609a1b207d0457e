"""Table tests of the replica topology (driver.parallel.Topology)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from driver.parallel import Topology


@pytest.mark.parametrize(
    ("world", "fsdp", "group", "rank", "expected"),
    # expected: group_of, groups, lowest_rank(group_of), replica_of, group_rank
    [
        (4, 1, None, 3, (3, 4, 3, 3, 0)),
        (8, 2, 4, 5, (1, 2, 4, 2, 1)),
        (8, 2, None, 5, (2, 4, 4, 2, 1)),
        (16, 4, 8, 15, (1, 2, 8, 3, 7)),
        (1, 1, None, 0, (0, 1, 0, 0, 0)),
    ],
)
def test_topology(world, fsdp, group, rank, expected):
    topo = Topology.from_config(SimpleNamespace(fsdp_size=fsdp, replica_group_size=group), world)
    g = topo.group_of(rank)
    got = (g, topo.groups, topo.lowest_rank(g), topo.replica_of(rank), topo.group_rank(rank))
    assert got == expected
    assert rank in topo.ranks_of(g)


@pytest.mark.parametrize(("world", "shard", "group"), [(6, 4, 4), (8, 2, 3), (0, 1, 1)])
def test_bad_topology(world, shard, group):
    with pytest.raises(ValueError):
        Topology(world, shard, group)


@pytest.mark.parametrize(
    ("world", "group", "rank", "position", "writes"),
    # position: the rank's group's place among the live groups (None: every group live)
    [
        (4, 1, 0, None, True),
        (4, 1, 1, None, False),
        (4, 1, 1, 0, True),  # group 0 lost: group 1 is the lowest live group
        (4, 1, 2, 1, False),
        (8, 4, 4, 0, True),  # the lowest rank of the lowest live group
        (8, 4, 5, 0, False),
        (8, 4, 0, 0, True),
    ],
)
def test_the_writer_is_the_lowest_rank_of_the_lowest_live_group(
    world, group, rank, position, writes
):
    assert Topology(world, 1, group).is_writer(rank, position) is writes


def test_the_writers_row_is_the_row_of_record():
    from driver.metrics.rank import of_record, rank_row

    row = {"step": 3, "loss": 1.5, "lr": 0.1, "step_time": 0.2, "time": 1.0, "ft_heals": 0}
    assert of_record(rank_row(row, 0, 0)) and not of_record(rank_row(row, 1, 0))
    sent = rank_row(row, 1, 0, full=True)  # rank 1 writes while rank 0's group is lost
    assert of_record(sent) and sent["loss"] == 1.5 and sent["rank"] == 1
    assert not of_record(rank_row(row, 0, 0, full=False))
