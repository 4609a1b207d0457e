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

    join = ray_join(workers, layout, "gloo", 60)
    sender = Sender("evaluator", len(workers), join, layout, "gloo", 60)
    sender.push(step, model.state_dict())
"""

from __future__ import annotations

import logging
import threading
import time
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


def ray_join(workers: list, layout: list[list], backend: str, timeout_s: float):
    """A `join` for Sender: asks each worker actor (AuxWorker) to join as rank 1..N."""

    def join(addr: tuple[str, int], prefix: str, size: int):
        import ray

        refs = [
            w.refresh_join.remote(addr, prefix, i + 1, size, layout, backend, timeout_s)
            for i, w in enumerate(workers)
        ]
        return lambda: ray.get(refs, timeout=timeout_s)

    return join


def ray_alive(workers: list, timeout_s: float):
    """An `alive` for Sender: every worker actor still receives under `prefix` (a restarted
    worker has no receiver, so the group is formed again before the next broadcast)."""

    def alive(prefix: str) -> bool:
        import ray

        try:
            joined = ray.get([w.refresh_prefix.remote() for w in workers], timeout=timeout_s)
        except Exception:
            return False
        return all(p == prefix for p in joined)

    return alive


class Sender:
    """Rank 0's side: forms the group (`join(addr, prefix, size)` asks the other members to
    join and returns a function that waits until each has started to) and broadcasts
    versions from a
    background thread; a push while one is in flight is skipped (counted). Before each
    broadcast `alive(prefix)`, when given, says whether every member still receives; if
    not, the group is formed again (a new generation) first."""

    def __init__(self, service: str, members: int, join, layout: list[list], backend: str,
                 timeout_s: float, host: str | None = None, alive=None):  # fmt: skip
        self.service, self.size, self.join, self.layout = service, members + 1, join, layout
        self.alive, self.prefix = alive, None
        self.backend, self.timeout_s, self.host = backend, timeout_s, host
        self.device = "cuda" if backend == "nccl" else "cpu"
        self.group, self.store, self.generation = None, None, 0
        self.sent, self.skipped, self.failures, self.last_error = 0, 0, 0, None
        self.thread: threading.Thread | None = None

    def _form(self) -> None:
        import torch.distributed as dist

        if self.host is None:
            import ray

            self.host = ray.util.get_node_ip_address()
        timeout = timedelta(seconds=self.timeout_s)
        if self.store is None:
            self.store = dist.TCPStore(self.host, 0, is_master=True, timeout=timeout,
                                       wait_for_workers=False)  # fmt: skip
        self.generation += 1
        prefix = self.prefix = f"refresh/{self.service}/{self.generation}/"
        addr = (self.host, self.store.port)
        self.join(addr, prefix, self.size)()  # every member has started joining (or raised)
        self.group, _ = make_group(addr, prefix, 0, self.size, self.backend, timeout, self.store)

    def push(self, version: int, state: dict) -> bool:
        """Snapshot `state` now and broadcast it as `version` in the background."""
        if self.thread is not None and self.thread.is_alive():
            self.skipped += 1
            return False
        flat = flatten(state, self.layout, self.device)
        self.thread = threading.Thread(target=self._send, args=(version, flat), daemon=True)
        self.thread.start()
        return True

    def _send(self, version: int, flat) -> None:
        started = time.monotonic()
        try:
            if self.group is not None and self.alive and not self.alive(self.prefix):
                log.warning("refresh %s: a member stopped receiving; forming the group again",
                            self.service)  # fmt: skip
                self.group = None  # a member restarted: its old group cannot reach it
            if self.group is None:
                self._form()
            self._broadcast(version, flat)
            self.sent += 1
        except Exception as err:  # a worker died: form the group again next time
            self.failures += 1
            self.last_error = f"{type(err).__name__}: {err}".splitlines()[0]
            log.warning("refresh %s: version %d failed after %.1f s: %s", self.service,
                        version, time.monotonic() - started, self.last_error)  # fmt: skip
            self.group = None

    def _broadcast(self, version: int, flat) -> None:
        import torch

        timeout = timedelta(seconds=self.timeout_s)
        count = 0 if flat is None else flat.numel()
        header = torch.tensor([version, count], dtype=torch.int64, device=self.device)
        self.group.broadcast(header, 0, timeout).wait()
        if version != STOP:
            self.group.broadcast(flat, 0, timeout).wait()

    def wait(self, timeout_s: float | None = None) -> None:
        """Wait for the broadcast in flight, if any."""
        if self.thread is not None:
            self.thread.join(timeout_s)

    def close(self) -> None:
        """End the receivers' loops (STOP) and drop the group."""
        self.wait(self.timeout_s)
        if self.group is not None:
            try:
                self._broadcast(STOP, None)
            except Exception:
                pass
        self.group = None

    def stats(self) -> dict:
        out = {"sent": self.sent, "skipped": self.skipped, "failures": self.failures}
        return {**out, **({"last_error": self.last_error} if self.last_error else {})}
