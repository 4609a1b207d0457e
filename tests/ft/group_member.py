"""One member of replica group 0 (2 members) for tests/ft/test_group_lost.py, in a process
of its own: `python -m tests.ft.group_member RANK LIGHTHOUSE QUORUM_TIMEOUT_S` with the
group's store in MASTER_ADDR/MASTER_PORT. It builds its FtReplica and prints "built"; rank 0
then only waits (it never asks for a quorum); rank 1 waits for a line on stdin, asks for
the first quorum and prints what `begin_step` raised, as JSON."""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    import torch

    from driver.config.ft import FtConfig
    from driver.ft.replica import FtReplica

    rank, lighthouse, timeout_s = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    settings = {"quorum_timeout_s": timeout_s, "timeout_s": 30, "watchdog_s": 0}
    cfg = FtConfig.from_dict({"enabled": True, "min_replicas": 1, **settings})
    model = torch.nn.Linear(4, 4)
    state = {"model": model, "optimizer": torch.optim.SGD(model.parameters(), lr=0.1)}
    ft = FtReplica(cfg, 0, 1, lighthouse, state, group_rank=rank, group_size=2)
    print("built", flush=True)
    if rank == 0:
        time.sleep(600)
        return
    sys.stdin.readline()
    started = time.monotonic()
    try:
        ft.begin_step()
        got = {"raised": None}
    except Exception as err:  # noqa: BLE001 (what it raised is the answer)
        got = {"raised": type(err).__name__, "message": str(err)}
    print(json.dumps({**got, "after_s": time.monotonic() - started}), flush=True)


if __name__ == "__main__":
    main()
