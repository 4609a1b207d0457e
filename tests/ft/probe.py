"""A replica group of one process on plain torchft (Manager, ProcessGroupGloo, torchft's
DistributedDataParallel and Optimizer wrapper), for the kill-mid-allreduce check that
decides which torchft build the project pins.

    python -m tests.ft.probe LIGHTHOUSE REPLICA STEPS OUT [KILL_STEP PHASE]

PHASE is before, during or after: the replica SIGKILLs itself in the forward pass, inside
the gradient allreduce (after it was issued) or after the optimizer step of KILL_STEP.
Each committed step appends one JSON line to OUT: step, parameter digest, participants.
With `PROBE_GATE=DIR:COUNT` in the environment, a replica asks for no quorum until COUNT
replicas are ready (a file each in DIR): otherwise two fast starters can finish every step
before a slow third joins.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path


def digest(model) -> str:
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().numpy().tobytes())
    return h.hexdigest()[:16]


def gate(spec: str, replica: int, timeout_s: float = 120.0) -> None:
    """Wait until `COUNT` replicas marked themselves ready in `DIR` (`spec` is DIR:COUNT)."""
    if not spec:
        return
    folder, count = Path(spec.rsplit(":", 1)[0]), int(spec.rsplit(":", 1)[1])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"ready-{replica}").touch()
    deadline = time.monotonic() + timeout_s
    while len(list(folder.glob("ready-*"))) < count and time.monotonic() < deadline:
        time.sleep(0.05)


def main(argv: list[str]) -> int:
    import torch
    from torch.distributed import TCPStore
    from torchft import DistributedDataParallel, Manager, Optimizer, ProcessGroupGloo

    lighthouse, replica, steps, out = argv[0], int(argv[1]), int(argv[2]), argv[3]
    kill_step, phase = (int(argv[4]), argv[5]) if len(argv) > 5 else (-1, "")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 8))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    pg = ProcessGroupGloo(timeout=timedelta(seconds=10))

    def load(sd):
        model.load_state_dict(sd["model"])
        opt.load_state_dict(sd["optim"])

    manager = Manager(
        pg=pg,
        min_replica_size=2,
        load_state_dict=load,
        state_dict=lambda: {"model": model.state_dict(), "optim": opt.state_dict()},
        replica_id=f"probe_{replica}",
        store_addr="127.0.0.1",
        store_port=store.port,
        rank=0,
        world_size=1,
        lighthouse_addr=lighthouse,
        hostname="127.0.0.1",
        timeout=timedelta(seconds=10),
        quorum_timeout=timedelta(seconds=60),
        use_async_quorum=False,
    )
    ddp = DistributedDataParallel(manager, model)
    optim = Optimizer(manager, opt)
    real_allreduce = pg.allreduce

    def allreduce(*args, **kwargs):
        work = real_allreduce(*args, **kwargs)
        if manager.current_step() == kill_step and phase == "during":
            os.kill(os.getpid(), signal.SIGKILL)
        return work

    pg.allreduce = allreduce
    gate(os.environ.get("PROBE_GATE", ""), replica)
    with open(out, "a") as f:
        while manager.current_step() < steps:
            step = manager.current_step()
            optim.zero_grad()
            gen = torch.Generator().manual_seed(1000 * step + replica)
            x = torch.randn(64, 256, generator=gen)
            loss = ddp(x).pow(2).mean()
            if step == kill_step and phase == "before":
                os.kill(os.getpid(), signal.SIGKILL)
            loss.backward()
            optim.step()
            if manager.current_step() > step:
                row = {
                    "step": manager.current_step(),
                    "digest": digest(model),
                    "participants": manager.num_participants(),
                    "nan": any(bool(p.isnan().any()) for p in model.parameters()),
                }
                f.write(json.dumps(row) + "\n")
                f.flush()
            if step == kill_step and phase == "after":
                os.kill(os.getpid(), signal.SIGKILL)
    manager.shutdown(wait=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
