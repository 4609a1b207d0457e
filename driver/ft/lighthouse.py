"""The driver side of torchft: the Lighthouse that forms quorums of replica groups, and a
start gate so the groups present at start form the first quorum together.

    lh = DriverSide(ft_config, groups_at_start=4, host="10.0.0.2")
    lh.lighthouse_addr, lh.gate_addr          # hand both to every replica group
    ...
    lh.shutdown()

The Lighthouse forms a quorum once `ft.min_replicas` groups ask and every heartbeating
group joined (or `ft.join_timeout_ms` passed); a group whose heartbeat is older than
`ft.heartbeat_timeout_ms` no longer counts. Without the gate, the groups whose processes
start first would form a quorum of `min_replicas` and the late ones would join a step later
(healing from the others), so runs would differ from the failure-free schedule.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

from driver.config.ft import FtConfig

GATE_KEY = "ft/started"


def lighthouse_kwargs(cfg: FtConfig) -> dict:
    """The Lighthouse's settings from the config: `LighthouseServer(**kwargs)` here, or
    `ray.train.v2.torch.torchft_config.TorchftConfig(lighthouse_kwargs=...)` under Ray Train
    (its actor on the head node; workers find it in the TORCHFT_LIGHTHOUSE variable)."""
    return {
        "bind": "[::]:0",
        "min_replicas": cfg.min_replicas,
        "join_timeout_ms": cfg.join_timeout_ms,
        "quorum_tick_ms": cfg.quorum_tick_ms,
        "heartbeat_timeout_ms": cfg.heartbeat_timeout_ms,
    }


class DriverSide:
    """A torchft Lighthouse plus the start gate's TCPStore, both on ports from the OS."""

    def __init__(self, cfg: FtConfig, groups_at_start: int, host: str = "127.0.0.1"):
        os.environ.setdefault("RUST_LOG", "warn")  # the Lighthouse logs every quorum at info
        from torch.distributed import TCPStore
        from torchft.coordination import LighthouseServer

        self.server = LighthouseServer(**lighthouse_kwargs(cfg))
        self.gate = TCPStore(host, 0, is_master=True, wait_for_workers=False)
        self.gate.set("ft/expected", str(groups_at_start))
        port = self.server.address().rsplit(":", 1)[1]
        self.lighthouse_addr = f"http://{host}:{port}"
        self.gate_addr = f"{host}:{self.gate.port}"

    def shutdown(self) -> None:
        self.server.shutdown()


def pass_gate(gate_addr: str, timeout_s: float) -> None:
    """A group's first arrival: count itself in and wait until all groups expected at start
    did (a group started later, to replace a lost one, passes at once)."""
    from torch.distributed import TCPStore

    host, port = gate_addr.rsplit(":", 1)
    store = TCPStore(host, int(port), is_master=False, timeout=timedelta(seconds=timeout_s))
    expected = int(store.get("ft/expected"))
    arrived = store.add(GATE_KEY, 1)
    deadline = time.monotonic() + timeout_s
    while arrived < expected:
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"ft: {arrived} of {expected} replica groups started "
                f"within ft.start_timeout_s={timeout_s}"
            )
        time.sleep(0.02)
        arrived = store.add(GATE_KEY, 0)
