"""The Curve-authenticated link: admitted keys talk, unknown keys are refused and logged."""

from __future__ import annotations

import logging
import shutil

import torch
import zmq

from driver.diloco import keys
from driver.diloco.link import Client, Server
from driver.messaging import wire


def test_admitted_learner_round_trip_with_raw_tensor_frames(keys_dir):
    server = Server("tcp://127.0.0.1:*", keys_dir)
    client = Client(server.address, keys.client_keys(keys_dir, "a"))
    try:
        grad = {"w": torch.arange(6, dtype=torch.float32).view(2, 3).to(torch.bfloat16)}
        rid = client.request("push", {"learner": "a", "grad": grad})
        peer, msg = server.recv(10)
        assert (msg.kind, msg.method, msg.id) == ("req", "push", rid)
        got = wire.decode(msg.body, torch=True)["grad"]["w"]
        assert got.dtype == torch.bfloat16 and torch.equal(got, grad["w"])
        assert len(msg.body) == 2  # JSON + one raw frame of 12 bytes, nothing pickled
        assert bytes(memoryview(msg.body[1])).__len__() == 12
        server.reply(peer, rid, {"ok": True})
        reply = client.recv(10)
        assert reply.id == rid and wire.decode(reply.body) == {"ok": True}
    finally:
        client.close()
        server.close(0)


def test_unknown_key_is_refused_and_logged(keys_dir, tmp_path, caplog):
    rogue = keys.generate(tmp_path / "rogue", ["a"])  # a learner "a" with another key
    shutil.copy(f"{keys_dir}/synchronizer.key", rogue / "synchronizer.key")
    server = Server("tcp://127.0.0.1:*", keys_dir)
    client = Client(server.address, keys.client_keys(rogue, "a"))
    try:
        with caplog.at_level(logging.WARNING, logger="driver.diloco.link"):
            client.request("join", {"learner": "a"})
            assert server.recv(2.0) is None
            assert client.recv(0.5) is None
        assert len(server.allowlist.refused) >= 1
        assert "refused a peer with an unknown Curve key" in caplog.text
    finally:
        client.close()
        server.close(0)


def test_plain_client_without_curve_gets_nothing(keys_dir):
    server = Server("tcp://127.0.0.1:*", keys_dir)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    sock.connect(server.address)
    try:
        sock.send_multipart(
            wire.pack(wire.Message("req", id=1, method="join", body=wire.encode({})))
        )
        assert server.recv(1.5) is None
    finally:
        sock.close(0)
        ctx.term()
        server.close(0)


def test_malformed_message_gets_a_protocol_error(keys_dir):
    server = Server("tcp://127.0.0.1:*", keys_dir)
    client = Client(server.address, keys.client_keys(keys_dir, "b"))
    try:
        client.sock.send_multipart([b"not json"])
        assert server.recv(5) is None
        reply = client.recv(5)
        assert reply.kind == "err" and reply.code == "protocol"
    finally:
        client.close()
        server.close(0)


def test_keys_from_env_as_a_cluster_passes_them(keys_dir, tmp_path, monkeypatch):
    from driver.diloco.learner import Learner, LearnerConfig

    k8s = keys.write_secret_files(keys_dir, ["a"])
    sync_env = {f"REVE_DILOCO_{k.upper().replace('-', '_')}": (k8s / "synchronizer" / k).read_text()
                for k in ("public-key", "secret-key", "allowed")}  # fmt: skip
    learner_env = {f"REVE_DILOCO_{k.upper().replace('-', '_')}": (k8s / "a" / k).read_text()
                   for k in ("public-key", "secret-key", "server-key")}  # fmt: skip
    server = Server("tcp://127.0.0.1:*", "env", environ=sync_env)
    for name, value in learner_env.items():  # a Secret's keys: names in the config only
        monkeypatch.setenv(name, value)
    cfg = LearnerConfig(server.address, "a", keys_env_prefix="REVE_DILOCO_")
    ln = Learner(cfg)
    try:
        ln.client.request("join", {"learner": "a"})
        assert server.recv(10) is not None
    finally:
        ln.close()
        server.close(0)


def test_missing_keys_are_one_line_errors():
    import pytest

    from catalog.errors import InputError
    from driver.diloco.learner import LearnerConfig

    with pytest.raises(InputError, match="REVE_DILOCO_PUBLIC_KEY: not a Curve key"):
        LearnerConfig("tcp://x:1", "a").curve({})
    with pytest.raises(ValueError, match="REVE_DILOCO_ALLOWED"):
        keys.from_env({"REVE_DILOCO_PUBLIC_KEY": "x" * 40})
