"""An embedded run listens on nothing the machine's interfaces reach: it runs in a network
namespace of its own (driver/embedded/netns.py), unless it needs the network."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from driver.embedded.netns import NETWORK_ENV, loopback_commands, network_reason
from tests.driver.test_interrupt import descendants, output, start_driver, wait_for_rows


@pytest.mark.parametrize(
    ("config", "environ", "reason"),
    [
        ({"run": {"name": "x"}, "checkpoint": {"root": "outputs/checkpoints"}}, {}, None),
        ({"checkpoint": {"root": "file:///tmp/c"}, "data": {"url": "memory://a"}}, {}, None),
        ({"logging": {"clickhouse_url": "http://ch:8123"}}, {}, "logging.clickhouse_url names http://"),
        ({"checkpoint": {"root": "gs://bucket/ckpt"}}, {}, "checkpoint.root names gs://"),
        ({"data": {"files": ["a", "s3://b/c"]}}, {}, "data.files.1 names s3://"),
        ({"run": {"local_dashboard": True}}, {}, "run.local_dashboard is on"),
        ({"diloco": {"address": "tcp://127.0.0.1:5555"}}, {}, "a DiLoCo learner reaches"),
        ({}, {NETWORK_ENV: "host"}, f"{NETWORK_ENV}=host"),
        ({"run": {"name": "a://b c"}}, {}, "run.name names a://"),
        ({"train": {"note": "see http docs: not a URL"}}, {}, None),
    ],
)  # fmt: skip
def test_network_reason(config, environ, reason):
    got = network_reason(config, environ)
    assert got == reason if reason is None else got.startswith(reason)


def test_loopback_carries_the_machines_address():
    assert loopback_commands("10.1.2.3") == [
        ["ip", "link", "set", "lo", "up"],
        ["ip", "addr", "add", "10.1.2.3/32", "dev", "lo"],
        ["ip", "route", "add", "8.8.8.8/32", "dev", "lo", "src", "10.1.2.3"],
    ]
    assert ["ip", "addr", "add", "127.0.0.1/32", "dev", "lo"] not in loopback_commands("127.0.0.1")


def listening(net: str) -> dict[int, str]:
    """inode -> local address of every listening TCP socket in `net` (/proc/net, or
    /proc/PID/net: that process's namespace)."""
    found = {}
    for name in ("tcp", "tcp6"):
        try:
            lines = Path(net, name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A":  # LISTEN
                found[int(fields[9])] = fields[1]
    return found


def sockets(pid: int) -> set[int]:
    """Inodes of the sockets process `pid` holds."""
    found = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                found.add(int(target[8:-1]))
    except OSError:
        pass
    return found


def namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def namespaces_work() -> bool:
    done = subprocess.run(["unshare", "--net", "true"], capture_output=True, check=False)
    if done.returncode == 0:
        return True
    done = subprocess.run(["unshare", "--user", "--map-root-user", "--net", "true"],
                          capture_output=True, check=False)  # fmt: skip
    return done.returncode == 0


def test_an_embedded_run_listens_on_nothing_outside_its_namespace(tmp_path):
    if not namespaces_work():
        pytest.skip("this machine cannot make network namespaces")
    proc = start_driver(tmp_path, "train.steps=3000", "checkpoint.interval_steps=0")
    try:
        wait_for_rows(proc, tmp_path, 2)  # Ray, its agents and the workers are all up
        run = descendants(proc.pid) - {proc.pid}  # the supervisor stays on the host
        held = set().union(*(sockets(pid) for pid in run))
        host = listening("/proc/net")  # this test's namespace: the host's
        inside = {}
        for pid in run:
            inside.update(listening(f"/proc/{pid}/net"))
        exposed = {host[inode] for inode in held & set(host)}
        assert not exposed, f"listening on the host's network: {sorted(exposed)}"
        assert len(held & set(inside)) >= 3  # GCS, raylet, workers: listening in there
        listeners = {pid for pid in run if sockets(pid) & set(inside)}
        assert os.readlink("/proc/self/ns/net") not in {namespace(pid) for pid in listeners}
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    assert "host's network" not in output(tmp_path)
