"""Gathering what the other nodes of a run hold (driver.output.crash_gather.gather) on a real
multi-node Ray of this machine (ray.cluster_utils: two raylets): a task pinned to the
other node returns its flight recorder dump, its log tails and its kernel log, and moves
the dump aside; the driver's own node is not asked (write_bundle reads it itself)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHILD = """
import json, sys
import ray
from ray.cluster_utils import Cluster
from driver.output import crash_gather
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
cluster.add_node(num_cpus=1)
ray.init(address=cluster.address)
cluster.wait_for_nodes()
found, missing = crash_gather.gather(sys.argv[1], timeout_s=120)
print(json.dumps({"found": found, "missing": missing}))
ray.shutdown()
cluster.shutdown()
"""


@pytest.mark.slow  # two raylets start: about 35 s
def test_the_other_nodes_dumps_and_log_tails_come_back(tmp_path):
    dumps = tmp_path / "flight-recorder"
    dumps.mkdir()
    (dumps / "rank_5.json").write_text(
        json.dumps({"version": "2.4", "entries": [], "pg_config": {}})
    )
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "train-rank-5.jsonl").write_text('{"line": "last words"}\n')
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["missing"] == [] and len(result["found"]) == 1  # the head is not asked
    (node,) = result["found"]
    assert set(node["dumps"]) == {"5"} and "last words" in node["logs"]["train-rank-5.jsonl"]
    assert node["kernel"] or node["kernel_source"]
    assert not list(dumps.glob("rank_*")) and (dumps / "collected" / "rank_5.json").exists()
