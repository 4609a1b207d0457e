"""A learner of several processes (torch.distributed, gloo): rank 0 talks to the
synchronizer, every rank holds the same sync state and merges each round's shared weights
into its own weights, so ranks that move alike (as DDP replicas do) stay alike. (FSDP
shards: tests/diloco/test_layout.py.)"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

RANK = """
import json, sys, torch, torch.distributed as dist
from driver.diloco.learner import make
from driver.config.diloco import LearnerConfig
rank, (address, keys, store, out) = int(sys.argv[1]), sys.argv[2:6]
dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
torch.manual_seed(0)
model = torch.nn.Linear(4, 3)
cfg = LearnerConfig(address, "a", keys, sync_every=2, mode=sys.argv[6], compression="fp32",
                    barrier_timeout_s=30, join_timeout_s=30, fragments=int(sys.argv[7]))
learner = make(cfg, model)
learner.start(model)
for step in range(4):
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * (step + 1))  # every rank alike, as DDP replicas move
    learner.after_step(step, model)
learner.finish(model)
flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()
parts = getattr(learner, "parts", [learner])
base = [v.reshape(-1).tolist() for part in parts for v in part.base.values()]
rounds = [part.round for part in parts]
json.dump({"rank": rank, "weights": flat, "base": base, "rounds": rounds},
          open(f"{out}/rank{rank}.json", "w"))
learner.close()
dist.destroy_process_group()
import os; os._exit(0)  # done: no finalization (tests/support/gloo_exit.py)
"""


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "fragments"), [("barrier", 1), ("decoupled", 2)])
def test_every_rank_holds_the_same_state_and_merged_weights(
    sync_thread, keys_dir, tmp_path, mode, fragments
):
    import subprocess

    sync = sync_thread(lr=1.0, momentum=0.0, compression="fp32")
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    args = [sync.address, keys_dir, str(tmp_path / "store"), str(tmp_path), mode, str(fragments)]
    procs = [subprocess.Popen([sys.executable, str(script), str(r), *args], cwd=Path.cwd())
             for r in (0, 1)]  # fmt: skip
    assert [p.wait(300) for p in procs] == [0, 0]
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0["rounds"] == r1["rounds"] and min(r0["rounds"]) >= 1
    assert r0["base"] == r1["base"]  # the same sync state on every rank
    assert r0["weights"] == r1["weights"]  # every merge reached every rank
