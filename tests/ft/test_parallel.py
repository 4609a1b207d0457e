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
