"""A serving loop under attack, in a process of its own, driven over a JSON control pipe.

`Target(kind, options)` spawns the process, which starts the loop and answers:
`info` (where it listens), `stats` (its counters, whether its serving thread is alive,
its RSS and peak RSS in bytes), `reset_peak` (the peak RSS from now) and `stop`.

Kinds: "proxy" (a ProxyServer with one WorkerServer behind it), "worker" (a WorkerServer
bound on TCP), "channel" (the run's DriverChannel), "synchronizer" (a DiLoCo Synchronizer
with its link.Server), "learner" (a DiLoCo Learner stepping a small model against the
address in `options`, the suite's hostile synchronizer).
"""

from __future__ import annotations

import json
import math
import multiprocessing as mp
import os
import shutil
import threading
import time
from typing import Any

from tests.support.tmp import temp_folder

SPAWN = mp.get_context("spawn")


class Target:
    """The parent's handle on a serving loop in its own process."""

    def __init__(self, kind: str, options: dict):
        self.conn, child = SPAWN.Pipe()
        self.proc = SPAWN.Process(target=_main, args=(kind, options, child), daemon=True)
        self.proc.start()
        child.close()
        if not self.conn.poll(180):
            raise RuntimeError(f"{kind} target did not start")
        self.info = json.loads(self.conn.recv_bytes())

    def ask(self, what: str, timeout_s: float = 60.0) -> dict:
        self.conn.send_bytes(json.dumps({"do": what}).encode())
        if not self.conn.poll(timeout_s):
            raise RuntimeError(f"target did not answer {what!r} in {timeout_s} s")
        return json.loads(self.conn.recv_bytes())

    def close(self) -> None:
        try:
            if self.proc.is_alive():
                self.ask("stop", 20)
        except (OSError, EOFError, RuntimeError):
            pass
        self.proc.join(10)
        if self.proc.exitcode is None:
            self.proc.kill()
            self.proc.join(5)


def memory() -> dict:
    """This process's RSS and peak RSS (bytes)."""
    out = {}
    with open("/proc/self/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out["rss" if key == "VmRSS" else "peak"] = int(value.split()[0]) * 1024
    return out


def _main(kind: str, options: dict, conn: Any) -> None:
    import logging

    logging.getLogger("driver").setLevel(logging.CRITICAL)  # thousands of refusals: counted
    server = SERVERS[kind](options)
    conn.send_bytes(json.dumps(server.info).encode())
    while True:
        order = json.loads(conn.recv_bytes())["do"]
        if order == "stop":
            server.close()
            conn.send_bytes(b"{}")
            return
        if order == "reset_peak":
            with open("/proc/self/clear_refs", "w") as refs:
                refs.write("5")  # the peak RSS starts again from the RSS now
        stats = {**server.stats(), "alive": server.alive(), **memory()}
        conn.send_bytes(json.dumps(stats, default=str).encode())


class _Proxy:
    def __init__(self, options: dict):
        from driver.aux.proxy import ProxyServer
        from driver.aux.worker import WorkerServer
        from tests.aux.transport import Echo

        self.folder = temp_folder("hostile-")
        limit = options["limit"]
        self.worker = WorkerServer(Echo(), f"ipc://{self.folder}/w.sock", max_message_bytes=limit)
        self.proxy = ProxyServer("echo", [self.worker.start()], max_message_bytes=limit)
        self.info = {"address": self.proxy.start()}
        while self.proxy.live_workers() < 1:
            time.sleep(0.01)

    def stats(self) -> dict:
        return {**self.proxy.stats(), "worker": self.worker.stats()}

    def alive(self) -> bool:
        return self.proxy.thread.is_alive() and all(t.is_alive() for t in self.worker.threads)

    def close(self) -> None:
        self.proxy.stop()
        self.worker.stop()
        shutil.rmtree(self.folder, ignore_errors=True)  # (a spawned child runs no atexit)


class _Worker:
    def __init__(self, options: dict):
        from driver.aux.worker import WorkerServer
        from tests.aux.transport import Echo

        self.worker = WorkerServer(Echo(), "tcp://127.0.0.1:*", max_message_bytes=options["limit"])
        self.info = {"address": self.worker.start()}

    def stats(self) -> dict:
        return self.worker.stats()

    def alive(self) -> bool:
        return all(t.is_alive() for t in self.worker.threads)

    def close(self) -> None:
        self.worker.stop()


class _Channel:
    def __init__(self, options: dict):
        from driver.channel import DriverChannel, RunChannel

        self.channel = DriverChannel.start(RunChannel(), max_bytes=options["limit"])
        self.info = {"endpoint": self.channel.address.endpoint, "token": self.channel.token}

    def stats(self) -> dict:
        rows = self.channel.drain()  # what a driver does each interval
        return {**self.channel.stats(), "rows": len(rows)}

    def alive(self) -> bool:
        return self.channel._thread.is_alive()

    def close(self) -> None:
        self.channel.close()


class _Synchronizer:
    def __init__(self, options: dict):
        from driver.diloco.link import Server
        from driver.diloco.synchronizer import OuterConfig, Synchronizer

        self.folder = temp_folder("hostile-sync-")
        self.server = Server("tcp://127.0.0.1:*", options["keys"], options["limit"])
        cfg = OuterConfig(lr=1.0, momentum=0.5, round_timeout_s=0.2, compression="fp32")
        self.sync = Synchronizer(self.server, self.folder, cfg)
        self.thread = threading.Thread(target=self.sync.serve, daemon=True)
        self.thread.start()
        self.info = {"address": self.server.address}

    def stats(self) -> dict:
        finite = all(
            math.isfinite(float(t.abs().max()))
            for f in self.sync.fragments.values() if f.state is not None
            for part in (f.state.shared, f.state.momentum, f.state.view)
            for t in part.values()
        )  # fmt: skip
        return {**self.sync.stats(), "finite": finite, "round": self.sync.round}

    def alive(self) -> bool:
        return self.thread.is_alive()

    def close(self) -> None:
        self.sync.stop()
        self.thread.join(10)
        self.server.close(0)
        shutil.rmtree(self.folder, ignore_errors=True)


class _Learner:
    """A learner stepping a small model: its `after_step` is the link's serving side."""

    def __init__(self, options: dict):
        import torch

        from driver.diloco.learner import Learner, LearnerConfig

        torch.manual_seed(0)
        self.model = torch.nn.Linear(8, 4)
        cfg = LearnerConfig(options["address"], "a", options["keys"], sync_every=1,
                            compression="fp32", barrier_timeout_s=0.2, join_timeout_s=0.2,
                            retry_s=0.0)  # fmt: skip
        self.learner = Learner(cfg)
        self.running, self.error = True, ""
        self.steps = 0
        self.thread = threading.Thread(target=self._train, daemon=True)
        self.thread.start()
        self.info = {"pid": os.getpid()}

    def _train(self) -> None:
        try:
            self.learner.start(self.model)
            while self.running:
                with_noise = {k: v + 0.01 for k, v in self.model.state_dict().items()}
                self.model.load_state_dict(with_noise)
                self.learner.after_step(self.steps, self.model)
                self.steps += 1
        except BaseException as err:  # noqa: BLE001 (a lost learner: the suite counts it)
            self.error = f"{type(err).__name__}: {err}"
            raise

    def stats(self) -> dict:
        params = list(self.model.parameters())
        finite = all(math.isfinite(float(p.detach().abs().max())) for p in params)
        return {
            "steps": self.steps,
            "merges": len(self.learner.merges),
            "refused_updates": self.learner.refused_updates,
            "finite": finite,
            "error": self.error,
        }

    def alive(self) -> bool:
        return self.thread.is_alive()

    def close(self) -> None:
        self.running = False
        self.thread.join(10)
        self.learner.close()


SERVERS = {
    "proxy": _Proxy,
    "worker": _Worker,
    "channel": _Channel,
    "synchronizer": _Synchronizer,
    "learner": _Learner,
}
