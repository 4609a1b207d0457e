"""Weight refresh, rank 0's side (refresh.py): form the group and broadcast versions.

Rank 0 hosts the TCPStore and forms the group under a prefix per generation: `join` asks
every member (the service's workers, by their actors' `AuxWorker.refresh_join`, see
`ray_join`) to join, then rank 0 joins as group rank 0. `Sender.push` snapshots the model's
floating-point weights into one flat buffer (`refresh.flatten`) and broadcasts the header
and the buffer in a background thread, so the step does not wait; a push while one is in
flight is skipped (counted). Before each broadcast `alive` (`ray_alive`: every worker's
actor still receives under the group's prefix) is asked; if not (a worker restarted), the
group is formed again with a new generation first. A failed broadcast is counted, and the
next push forms the group again. `close` sends the STOP header.

    join = ray_join(workers, layout, "gloo", 60)
    sender = Sender("evaluator", len(workers), join, layout, "gloo", 60)
    sender.push(step, model.state_dict())
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

from driver.aux.refresh import STOP, flatten, log, make_group


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
