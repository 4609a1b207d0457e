"""FSDP + DiLoCo: a learner whose parameters FSDP shards syncs whole parameters (gathered
per parameter, every rank taking part), rank 0 talks to the synchronizer, and every rank
merges the new shared weights into its own shard. Real processes: a learner of 2 CPU
workers (gloo) wrapped by the driver's `wrap`, with FSDP 2 and with fsdp 1 (DDP), each
against a synchronizer process, ends with the same merged weights; and one of 4 workers
with HSDP (2 replicas of FSDP 2) against DDP over 4."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from driver.diloco import keys, local, state

ROOT = Path(__file__).resolve().parents[2]
RANK = """
import json, sys
from types import SimpleNamespace
import torch, torch.distributed as dist
from driver.config.diloco import LearnerConfig
from driver.diloco import hook, weights
from driver.parallel import wrap

rank, world, fsdp, address, keys, store, out, fragments = sys.argv[1:9]
rank, world, fsdp = int(rank), int(world), int(fsdp)
dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
torch.manual_seed(0)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        # 5 and 7 rows: FSDP's shards of 2 ranks are uneven
        self.blocks = torch.nn.ModuleList([torch.nn.Linear(4, 5), torch.nn.Linear(5, 7)])
        self.head = torch.nn.Linear(7, 3)

    def forward(self, x):
        for block in self.blocks:
            x = torch.tanh(block(x))
        return self.head(x)


cfg = SimpleNamespace(parallelism=SimpleNamespace(fsdp_size=fsdp))
model = wrap(Net(), cfg, torch.device("cpu"), world)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
learner = LearnerConfig(address, "a", keys, sync_every=2, compression="fp32",
                        barrier_timeout_s=60, join_timeout_s=60, fragments=int(fragments))
diloco = hook.prepare(model, learner)
diloco.start(model)
data = torch.Generator().manual_seed(rank)  # each rank its own batches
for step in range(4):
    x, y = torch.randn(8, 4, generator=data), torch.randn(8, 3, generator=data)
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    diloco.after_step(step, model)
diloco.end(model)
full = weights.read(weights.named(model))
parts = diloco.learner.parts if hasattr(diloco.learner, "parts") else [diloco.learner]
json.dump({
    "weights": {k: v.reshape(-1).tolist() for k, v in full.items()},
    "base": {k: v.reshape(-1).tolist() for p in parts for k, v in p.base.items()},
    "rounds": [p.round for p in parts],
    "sharded": any(weights.sharded(p) for p in model.parameters()),
}, open(f"{out}/rank{rank}.json", "w"))
dist.destroy_process_group()
import os; os._exit(0)  # done: no finalization (tests/support/gloo_exit.py)
"""


def learner_run(tmp_path: Path, world: int, fsdp: int, fragments: int) -> list[dict]:
    """The learner's ranks against a synchronizer process of its own; their records."""
    out = tmp_path / f"fsdp{fsdp}"
    out.mkdir()
    keys.generate(out / "keys", ["a"])
    sync, address = local.start_synchronizer(out, ["--expect", "a", "--compression", "fp32",
                                                   "--outer-lr", "0.7", "--outer-momentum",
                                                   "0.9", "--round-timeout", "30"])  # fmt: skip
    script = out / "rank.py"
    script.write_text(RANK)
    args = [str(world), str(fsdp), address, str(out / "keys"), str(out / "store"), str(out),
            str(fragments)]  # fmt: skip
    try:
        procs = [subprocess.Popen([sys.executable, str(script), str(r), *args], cwd=ROOT)
                 for r in range(world)]  # fmt: skip
        assert [p.wait(300) for p in procs] == [0] * world
    finally:
        sync.terminate()
        sync.wait(30)
    folders = [out / "state", *[out / "state" / f"fragment-{f}" for f in range(1, fragments)]]
    assert [len(state.read_rounds(folder)) for folder in folders] == [2] * fragments
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]


@pytest.mark.slow
@pytest.mark.parametrize(("world", "fragments"), [(2, 2), (4, 1)], ids=["fsdp", "hsdp"])
def test_an_fsdp_learner_merges_like_a_replicated_one(tmp_path, world, fragments):
    """FSDP 2 over 2 workers, two streaming fragments; HSDP (2 replicas of FSDP 2) over 4."""
    sharded = learner_run(tmp_path, world, 2, fragments)
    replicated = learner_run(tmp_path, world, 1, fragments)
    assert [r["sharded"] for r in sharded] == [True] * world
    assert [r["sharded"] for r in replicated] == [False] * world
    for records in (sharded, replicated):
        for other in records[1:]:
            assert other["rounds"] == records[0]["rounds"] == [2] * fragments
            assert other["weights"] == records[0]["weights"]  # every rank: the same weights
            assert other["base"] == records[0]["base"]  # and the same sync state
    for name, values in replicated[0]["weights"].items():
        assert sharded[0]["weights"][name] == pytest.approx(values, rel=1e-5, abs=1e-6), name
    for name, values in replicated[0]["base"].items():
        assert sharded[0]["base"][name] == pytest.approx(values, rel=1e-5, abs=1e-6), name
