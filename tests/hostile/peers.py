"""The hostile peers of each serving loop: which cases they send, how, and the legitimate
call that must still work (suites.py runs them).
"""

from __future__ import annotations

import random
import time

import zmq

from driver.messaging import wire
from tests.hostile import cases as c
from tests.hostile.targets import Target

COMMON = ("deep_info", "deep_body", "garbage", "truncated", "split", "many_frames",
          "huge_frame", "nan_deadline", "non_finite", "big_int", "bad_utf8", "wrong_kind",
          "replay", "flood", "slow")  # fmt: skip


def dealer(address: str, **options) -> zmq.Socket:
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.linger, sock.sndhwm, sock.rcvhwm, sock.sndtimeo = 0, 100_000, 100_000, 5000
    for name, value in options.items():
        setattr(sock, name, value)
    sock.connect(address)
    return sock


def encoded(method: str, payload, rid: int = 1, info: dict | None = None) -> list[bytes]:
    return c.request(method, [bytes(memoryview(f)) for f in wire.encode(payload)], rid, info)


class Suite:
    """What every suite shares: peers (DEALERs), slow senders, draining replies."""

    KINDS: tuple = COMMON
    HEAVY = ("split", "huge_frame")
    METHOD = "echo"

    def __init__(self, kind: str, options: dict, limit: int, peers: int):
        self.limit, self.peers = limit, peers
        self.target = Target(kind, options)
        self.socks: list[zmq.Socket] = []
        self.slow: c.SlowSenders | None = None
        self.strangers: list[zmq.Socket] = []  # kept open a while: their handshakes finish

    def keep(self, sock: zmq.Socket, most: int = 32) -> None:
        self.strangers.append(sock)
        while len(self.strangers) > most:
            self.strangers.pop(0).close(0)

    def warm(self) -> None:
        for _ in range(3):
            if not self.check():
                raise RuntimeError("the target does not serve a legitimate call")

    def send(self, kind: str, i: int, rng: random.Random) -> None:
        if kind == "slow":
            self.slow.step()
            return
        sock = self.socks[i % len(self.socks)]
        for frames in self.messages(kind, i, rng):
            sock.send_multipart(frames)

    def info(self) -> dict | None:
        return None

    def messages(self, kind: str, i: int, rng: random.Random) -> list[list[bytes]]:
        """The frames of the common kinds (a suite adds its own)."""
        info, method, limit = self.info(), self.METHOD, self.limit
        simple = {
            "deep_info": lambda: c.with_info(c.deep_json()),
            "deep_body": lambda: c.request(method, [c.body_json(c.deep_json(50_000))], i, info),
            "garbage": lambda: c.garbage(rng),
            "truncated": lambda: c.truncated(rng),
            "split": lambda: c.split(limit),
            "many_frames": c.many_frames,
            "huge_frame": lambda: c.huge_frame(limit),
            "nan_deadline": c.nan_deadline,
            "non_finite": lambda: c.request(method, c.non_finite_body(), i, info),
            "big_int": c.big_int_info,
            "bad_utf8": c.bad_utf8,
            "wrong_kind": lambda: c.wrong_kind(rng),
        }
        if kind in simple:
            return [simple[kind]()]
        if kind == "replay":
            return [c.request(method, [c.body_json(b"{}")], 1_000_000 + i, info)] * 2
        if kind == "flood":
            return [c.request(method, [c.body_json(b"{}")], 2_000_000 + i * 100 + k, info)
                    for k in range(50)]  # fmt: skip
        raise KeyError(kind)

    def drain(self) -> None:
        for sock in self.socks:
            while sock.poll(0):
                sock.recv_multipart(zmq.NOBLOCK)

    def settle(self) -> None:
        for _ in range(4):
            self.drain()
            time.sleep(0.25)

    def restarts(self, stats: dict) -> int:
        return int(stats.get("restarts", 0))

    def refused(self, stats: dict) -> dict:
        return dict(stats.get("refused", {}))

    def close(self) -> None:
        if self.slow is not None:
            self.slow.close()
        for sock in [*self.socks, *self.strangers]:
            sock.close(0)
        self.target.close()


class ProxySuite(Suite):
    KINDS = (*COMMON, "shm_ref", "torch_attr", "far_deadline")

    def __init__(self, limit: int, peers: int):
        from driver.aux.client import AuxClient

        super().__init__("proxy", {"limit": limit}, limit, peers)
        address = self.target.info["address"]
        self.socks = [dealer(address) for _ in range(peers)]
        self.slow = c.SlowSenders(address)
        self.client = AuxClient("echo", 0, {address: 1}, deadline_s=10)

    def messages(self, kind, i, rng):
        extra = {
            "shm_ref": lambda: c.request("echo", c.shm_reference(), i),
            "torch_attr": lambda: c.request("echo", c.torch_attribute(), i),
            "far_deadline": lambda: c.request("echo", [c.body_json(b"{}")], i, deadline=1e308),
        }
        return [extra[kind]()] if kind in extra else super().messages(kind, i, rng)

    def check(self) -> bool:
        return self.client.call("echo", {"ok": [1.5]}) == {"ok": [1.5]}

    def restarts(self, stats):
        return int(stats.get("restarts", 0)) + int(stats["worker"].get("restarts", 0))

    def refused(self, stats):
        worker = {k: v for k, v in stats["worker"].items() if k.startswith("refused_") and v}
        return {**stats.get("refused", {}), **{f"worker_{k}": v for k, v in worker.items()}}

    def close(self):
        self.client.close()
        super().close()


class WorkerSuite(ProxySuite):
    """A worker faced directly (as a process of the same user on its socket could)."""

    def __init__(self, limit: int, peers: int):
        Suite.__init__(self, "worker", {"limit": limit}, limit, peers)
        address = self.target.info["address"]
        self.socks = [dealer(address) for _ in range(peers)]
        self.slow = c.SlowSenders(address)
        self.probe = dealer(address)

    def send(self, kind, i, rng):
        if kind == "slow":
            return self.slow.step()
        sock = self.socks[i % len(self.socks)]
        for frames in self.messages(kind, i, rng):
            sock.send_multipart([b"rank-%d" % (i % self.peers), *frames])  # the client's id

    def check(self) -> bool:
        self.probe.send_multipart([b"probe", *encoded("echo", {"ok": 1}, rid=7)])
        if not self.probe.poll(10_000):
            return False
        _, *frames = self.probe.recv_multipart()
        reply = wire.parse(frames, self.limit)
        return reply.kind == "rep" and wire.decode(reply.body) == {"ok": 1}

    def restarts(self, stats):
        return int(stats.get("restarts", 0))

    def refused(self, stats):
        return {k: v for k, v in stats.items() if k.startswith("refused_") and v}

    def close(self):
        self.probe.close(0)
        Suite.close(self)


class ChannelSuite(Suite):
    """The run's channel: peers that hold the run's token (and misbehave), strangers."""

    KINDS = (*COMMON, "wrong_token", "no_credentials", "no_token", "wrong_method", "bad_args")
    METHOD = "sync"

    def __init__(self, limit: int, peers: int):
        from driver.channel import ChannelAddress

        super().__init__("channel", {"limit": limit}, limit, peers)
        self.endpoint, self.token = self.target.info["endpoint"], self.target.info["token"]
        creds = {"plain_username": b"worker", "plain_password": self.token.encode()}
        self.socks = [dealer(self.endpoint, **creds) for _ in range(peers)]
        self.slow = c.SlowSenders(self.endpoint)
        self.client = ChannelAddress(self.endpoint, self.token).connect(rank=0)

    def info(self) -> dict:
        return {"token": self.token}

    def messages(self, kind, i, rng):
        if kind in ("wrong_token", "no_credentials"):
            creds = {"plain_username": b"worker", "plain_password": b"0" * 32}
            stranger = dealer(self.endpoint, **(creds if kind == "wrong_token" else {}))
            try:
                stranger.send_multipart(encoded("hello", [0, {}], i, self.info()), zmq.NOBLOCK)
            except zmq.Again:
                pass  # no connection to queue on: what a stranger gets
            self.keep(stranger)
            return []
        token = self.info()
        extra = {
            "no_token": lambda: encoded("sync", [], i),
            "wrong_method": lambda: encoded("drain", [], i, token),
            "bad_args": lambda: encoded("hello", ["x"], i, token),
            "non_finite": lambda: c.request(
                "push_many", [c.body_json(b'[[{"step":1,"loss":NaN,"x":-Infinity}]]')], i, token
            ),
        }
        if kind in extra:
            return [extra[kind]()]
        if kind == "deep_body":
            return [c.request("push_many", [c.body_json(c.deep_json(50_000))], i, token)]
        if kind in ("replay", "flood"):
            return [encoded("sync", [], rid, token) for rid in self._ids(kind, i)]
        return super().messages(kind, i, rng)

    @staticmethod
    def _ids(kind: str, i: int) -> list[int]:
        return (
            [1_000_000 + i] * 2
            if kind == "replay"
            else [2_000_000 + 100 * i + k for k in range(50)]
        )

    def check(self) -> bool:
        return self.client.call("sync", timeout_s=10) is True

    def refused(self, stats):
        return dict(stats.get("refused", {}))

    def restarts(self, stats):
        return int(stats.get("loop_restarts", 0))

    def close(self):
        self.client.close()
        super().close()
