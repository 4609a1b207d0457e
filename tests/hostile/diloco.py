"""DiLoCo's hostile peers: learners on the allow-list that misbehave (and strangers) against
the synchronizer, and a synchronizer that misbehaves against a learner's link."""

from __future__ import annotations

import random
import time

import torch
import zmq

from driver.diloco import keys
from driver.diloco.link import Client
from driver.messaging import wire
from tests.hostile import cases as c
from tests.hostile.peers import COMMON, Suite, dealer, encoded
from tests.support.tmp import temp_folder

SHAPES = {"w": (4, 3), "b": (3,)}  # the synchronizer suite's model
LEARNER_SHAPES = {"weight": (4, 8), "bias": (4,)}  # the learner target's torch.nn.Linear(8, 4)
NAN, INF = float("nan"), float("inf")


def keys_folder(learners: list[str]) -> str:
    return str(keys.generate(temp_folder("hostile-keys-"), learners))


def tensors(shapes: dict, fill: float, dtype=torch.float32) -> dict:
    return {k: torch.full(shape, fill).to(dtype) for k, shape in shapes.items()}


def curve(folder: str, name: str) -> dict:
    public, secret, server = keys.client_keys(folder, name)
    return {"curve_publickey": public, "curve_secretkey": secret, "curve_serverkey": server}


def bad_updates(shapes: dict) -> dict:
    """Tensor sets that must never be merged or applied (name -> packed form)."""
    return {
        "nan": {"t": tensors(shapes, NAN)},
        "inf": {"t": tensors(shapes, INF)},
        "int8_list": {"t": tensors(shapes, 1, torch.int8), "s": [0.1] * len(shapes)},
        "int8_nan_scale": {"t": tensors(shapes, 1, torch.int8), "s": dict.fromkeys(shapes, NAN)},
        "wrong_shape": {"t": {k: torch.zeros(2, 2) for k in shapes}},
    }


class SynchronizerSuite(Suite):
    """Learners `a` and `b` (allowed keys) send what they must not; `c` is the honest one."""

    KINDS = (*COMMON, "nan_push", "inf_push", "big_push", "int8_list", "int8_nan_scale",
             "wrong_shape", "spoof", "bad_method", "bad_fragment", "nan_init",
             "unknown_key")  # fmt: skip
    METHOD = "join"

    def __init__(self, limit: int, peers: int):
        self.folder = keys_folder(["a", "b", "c"])
        super().__init__("synchronizer", {"keys": self.folder, "limit": limit}, limit, peers)
        self.address = self.target.info["address"]
        self.socks = [dealer(self.address, **curve(self.folder, "ab"[k % 2])) for k in range(peers)]
        self.slow = c.SlowSenders(self.address)
        self.client = Client(self.address, keys.client_keys(self.folder, "c"))
        self.round = -1

    def messages(self, kind, i, rng):
        name, r = "ab"[(i % len(self.socks)) % 2], self.round
        bad = bad_updates(SHAPES)
        pushes = {"nan_push": bad["nan"], "inf_push": bad["inf"],
                  "big_push": {"t": tensors(SHAPES, 1e6)}, **bad}  # fmt: skip
        if kind in pushes:
            return [encoded("push", {"learner": name, "round": r, "grad": pushes[kind]}, i)]
        good = {"t": tensors(SHAPES, 0.01)}
        payloads = {
            "spoof": ("push", {"learner": "c", "round": r, "grad": good}),
            "bad_method": ("merge", {"learner": name}),
            "bad_fragment": ("join", {"learner": name, "digest": "", "fragment": 999}),
            "nan_init": ("init", {"learner": name, "weights": bad["nan"], "fragment": 1 + i % 8}),
        }
        if kind in payloads:
            return [encoded(*payloads[kind], i)]
        if kind == "unknown_key":
            public, secret = zmq.curve_keypair()
            server = curve(self.folder, "a")["curve_serverkey"]
            stranger = dealer(self.address, curve_publickey=public, curve_secretkey=secret,
                              curve_serverkey=server)  # fmt: skip
            stranger.send_multipart(encoded("join", {"learner": "a", "digest": ""}, i))
            self.keep(stranger)
            return []
        if kind in ("replay", "flood"):
            ids = [1_000_000 + i] * 2 if kind == "replay" else range(10 * i, 10 * i + 10)
            return [encoded("join", {"learner": name, "digest": "x"}, rid) for rid in ids]
        return super().messages(kind, i, rng)

    def _call(self, method: str, payload: dict) -> dict:
        rid = self.client.request(method, payload)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            msg = self.client.recv(0.5)
            if msg is not None and msg.id == rid:
                if msg.kind != "rep":
                    raise RuntimeError(f"{method}: {msg.code} {msg.error}")
                return wire.decode(msg.body, torch=True)
        raise RuntimeError(f"{method}: no reply")

    def check(self) -> bool:
        reply = self._call("join", {"learner": "c", "digest": ""})
        if reply["kind"] == "empty":
            reply = self._call("init", {"learner": "c", "weights": {"t": tensors(SHAPES, 0.5)}})
        self.round = int(reply["round"])
        grad = {"t": tensors(SHAPES, 0.01)}
        reply = self._call("push", {"learner": "c", "round": self.round, "grad": grad})
        self.round = int(reply["round"])
        return reply["kind"] in ("delta", "full")

    def refused(self, stats):
        return {**stats.get("refused", {}), "unknown_keys": stats["refused_keys"]["refusals"]}

    def close(self):
        self.client.close()
        super().close()


class LearnerSuite(Suite):
    """A synchronizer (it holds the synchronizer's keys) that answers a learner's every
    request with a bad reply (a good one among them: the learner must still merge those)."""

    KINDS = ("good", "nan", "inf", "int8_list", "int8_nan_scale", "wrong_shape", "deep_body",
             "deep_info", "garbage", "truncated", "wrong_id", "flood", "err", "unknown_kind",
             "no_weights", "big_int", "nan_deadline", "empty", "infinite_round")  # fmt: skip
    HEAVY = ()

    def __init__(self, limit: int, peers: int):
        folder = keys_folder(["a"])
        public, secret = keys.server_keys(folder)
        self.sock = zmq.Context.instance().socket(zmq.ROUTER)
        self.sock.linger, self.sock.curve_server = 0, True
        self.sock.curve_publickey, self.sock.curve_secretkey = public, secret
        port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        address = f"tcp://127.0.0.1:{port}"
        super().__init__("learner", {"address": address, "keys": folder}, limit, 1)
        self.round, self.missed, self.steps = 0, 0, -1

    def send(self, kind: str, i: int, rng: random.Random) -> None:
        got = self._request()
        if got is None:
            self.missed += 1
            if self.missed > 3:
                raise RuntimeError("the learner stopped asking")
            return
        peer, msg = got
        for frames in self.replies(kind, msg, rng):
            self.sock.send_multipart([peer, *frames])

    def _request(self) -> tuple[bytes, wire.Message] | None:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if self.sock.poll(500):
                peer, *frames = self.sock.recv_multipart()
                return peer, wire.parse(frames, 1 << 30)
        return None

    def replies(self, kind: str, msg: wire.Message, rng: random.Random) -> list[list[bytes]]:
        rep = lambda payload, rid=msg.id: encoded_rep(rid, payload)  # noqa: E731
        bad = bad_updates(LEARNER_SHAPES)
        if kind == "good" or msg.method == "init":
            self.round += 1
            return [rep({"kind": "delta", "round": self.round,
                         "weights": {"t": tensors(LEARNER_SHAPES, 0.001)}})]  # fmt: skip
        if kind in bad:
            what = "full" if kind == "inf" else "delta"
            return [rep({"kind": what, "round": self.round + 1, "weights": bad[kind]})]
        frames = {
            "deep_body": lambda: _rep_frames(msg.id, [c.body_json(c.deep_json(50_000))]),
            "deep_info": lambda: c.with_info(c.deep_json(), kind=2),
            "garbage": lambda: c.garbage(rng),
            "truncated": lambda: c.truncated(rng),
            "big_int": c.big_int_info,
            "nan_deadline": c.nan_deadline,
            "err": lambda: [bytes(f) for f in wire.pack(wire.Message("err", msg.id, code="x"))],
            "wrong_id": lambda: rep({"kind": "same", "round": 3}, msg.id + 1000),
            "unknown_kind": lambda: rep({"kind": "weird", "round": 1}),
            "infinite_round": lambda: rep({"kind": "same", "round": INF}),
            "no_weights": lambda: rep({"kind": "delta", "round": self.round + 1}),
            "empty": lambda: rep({"kind": "empty", "round": -1}),
        }
        if kind == "flood":
            return [rep({"kind": "same", "round": 1}, rng.randrange(1 << 40)) for _ in range(20)]
        return [frames[kind]()]

    def warm(self) -> None:
        for i in range(3):
            self.send("good", i, random.Random(i))
        super().warm()

    def check(self) -> bool:
        """The learner trains on (its steps move), alive, with finite weights."""
        deadline = time.monotonic() + 5
        while True:
            stats = self.target.ask("stats")
            moved = stats["steps"] > self.steps
            if moved or time.monotonic() > deadline or not stats["alive"]:
                break
            time.sleep(0.05)
        self.steps = stats["steps"]
        return stats["alive"] and stats["finite"] and moved

    def refused(self, stats):
        return {"updates": stats["refused_updates"], "merges": stats["merges"]}

    def close(self):
        super().close()
        self.sock.close(0)


def encoded_rep(rid: int, payload) -> list[bytes]:
    return _rep_frames(rid, [bytes(memoryview(f)) for f in wire.encode(payload)])


def _rep_frames(rid: int, body: list[bytes]) -> list[bytes]:
    return [bytes(memoryview(f)) for f in wire.pack(wire.Message("rep", rid, body=body))]
