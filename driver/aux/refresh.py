"""Weight refresh: rank 0 broadcasts its model's weights to a service's workers.

Not through the remote-call layer: a standalone process group (ProcessGroupGloo on CPU,
ProcessGroupNCCL on GPU) over a TCPStore that rank 0 hosts, under a prefix per group
generation, apart from the training world's default group. Members: rank 0 (group rank 0)
and the service's workers (1..N), which join when rank 0 asks their actors
(`AuxWorker.refresh_join`). Each refresh is a header broadcast (version, element count)
and one flat float32 buffer. A worker receives into a fresh buffer and hands the complete
state to its handler only then (`Versioned.set`), so it never serves a half-updated model;
a request that started on version v keeps v. A broken group (a worker restarted) is formed
again, with a new generation, at the next refresh.

This module holds what both sides share (the flat buffer's layout, the group, the STOP
header) and the workers' side (`Receiver`, `Versioned`); rank 0's side (`Sender`) is
refresh_sender.py.

    served = Versioned()  # the handler's: its `load_weights` calls `served.set`
    receiver = Receiver(store_addr, prefix, rank, size, layout, "gloo", 60, served.set)
    receiver.start()  # what a worker's actor does in `AuxWorker.refresh_join`
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

log = logging.getLogger("driver.aux.refresh")

STOP = -1  # header version that ends the receivers' loops
RECEIVE_TIMEOUT = timedelta(days=1)  # receivers wait for the next refresh this long


def layout_of(state: dict) -> list[list]:
    """[name, shape, dtype] of every floating tensor of a state dict (the flat order)."""
    return [
        [name, list(t.shape), str(t.dtype).removeprefix("torch.")]
        for name, t in state.items()
        if t.is_floating_point()
    ]


def flatten(state: dict, layout: list[list], device=None):
    """One float32 buffer of the layout's tensors (a copy: the snapshot that is sent)."""
    import torch

    parts = [state[name].detach().reshape(-1).float() for name, _, _ in layout]
    flat = torch.cat(parts) if parts else torch.zeros(0)
    return flat.to(device) if device is not None else flat.clone()


def unflatten(flat, layout: list[list]) -> dict:
    """The state dict over a received buffer (views, cast back to each tensor's dtype)."""
    import torch

    state, offset = {}, 0
    for name, shape, dtype in layout:
        count = 1
        for size in shape:
            count *= size
        piece = flat[offset : offset + count].view(shape)
        state[name] = piece if dtype == "float32" else piece.to(getattr(torch, dtype))
        offset += count
    return state


def numel(layout: list[list]) -> int:
    total = 0
    for _, shape, _ in layout:
        count = 1
        for size in shape:
            count *= size
        total += count
    return total


class Versioned:
    """The version a handler serves: `set` swaps in a complete state, `get` returns the
    (version, state) pair a request uses from start to end."""

    def __init__(self, version: int = 0, state: dict | None = None):
        self._changed = threading.Condition()
        self._current = (version, state)

    def set(self, version: int, state: dict) -> None:
        with self._changed:
            if version > self._current[0]:
                self._current = (version, state)
                self._changed.notify_all()

    def get(self) -> tuple[int, dict | None]:
        with self._changed:
            return self._current

    def wait_for(self, version: int, timeout_s: float) -> tuple[int, dict | None]:
        """The current pair once its version is at least `version` (or after timeout_s)."""
        with self._changed:
            self._changed.wait_for(lambda: self._current[0] >= version, timeout_s)
            return self._current


def make_group(store_addr: tuple[str, int], prefix: str, rank: int, size: int, backend: str,
               timeout: timedelta, master_store=None):  # fmt: skip
    """A standalone process group (not the default group) over the TCPStore at store_addr."""
    import torch.distributed as dist

    store = master_store or dist.TCPStore(
        store_addr[0], store_addr[1], is_master=False, timeout=timeout
    )
    prefixed = dist.PrefixStore(prefix, store)
    if backend == "nccl":
        return dist.ProcessGroupNCCL(prefixed, rank, size), store
    return dist.ProcessGroupGloo(prefixed, rank, size, timeout), store


class Receiver:
    """A worker's side: joins the group, then receives versions in a thread and calls
    `target(version, state)` with each complete state."""

    def __init__(self, store, prefix, rank, size, layout, backend, timeout_s, target=None):
        self.args = (tuple(store), prefix, rank, size, backend)
        self.layout, self.timeout_s, self.target = layout, timeout_s, target
        self.version, self.error = 0, None
        self.thread = threading.Thread(target=self._run, name="refresh", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        import torch

        store, prefix, rank, size, backend = self.args
        log.info("refresh receiver %s: joining as %d of %d at %s", prefix, rank, size, store)
        try:
            group, _ = make_group(store, prefix, rank, size, backend, RECEIVE_TIMEOUT)
            device = torch.device("cuda") if backend == "nccl" else torch.device("cpu")
            while True:
                header = torch.zeros(2, dtype=torch.int64, device=device)
                group.broadcast(header, 0).wait()
                version, count = (int(v) for v in header.tolist())
                if version == STOP:
                    return
                flat = torch.empty(count, dtype=torch.float32, device=device)  # fresh buffer
                group.broadcast(flat, 0).wait()
                if self.target is not None:
                    self.target(version, unflatten(flat, self.layout))
                self.version = version
        except Exception as err:  # the sender went away or the group broke: wait for a re-join
            self.error = f"{type(err).__name__}: {err}".splitlines()[0]
            log.warning("refresh receiver %s: %s", prefix, self.error)

    def stop(self) -> None:
        """Forget the thread (it ends with its group's next error or STOP)."""
        self.target = None
