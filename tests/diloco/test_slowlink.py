"""The slow cross-region link (namespaces + veth + tc tbf) and the benchmark over it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.benches import load_bench
from tests.support import slowlink

REASON = slowlink.reason_unavailable()
needs_netns = pytest.mark.skipif(REASON is not None, reason=f"no network namespaces: {REASON}")


SERVE = """
import socket
s = socket.socket(); s.bind(("0.0.0.0", 0)); s.listen(); print(s.getsockname()[1], flush=True)
c, _ = s.accept(); print(c.recv(10).decode(), flush=True)
"""


def namespaces() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


@needs_netns
def test_ends_reach_each_other_through_limited_links_and_everything_is_removed():
    with slowlink.SlowLink(["x", "y"], rate="50mbit") as link:
        assert link.prefix in namespaces()
        listen = subprocess.Popen(
            link.wrap("y", [sys.executable, "-c", SERVE]), stdout=subprocess.PIPE
        )
        try:
            port = int(listen.stdout.readline())
            target = (link.address("y"), port)
            hello = f"import socket; socket.create_connection({target!r}, 10).sendall(b'hi')"
            subprocess.run(link.wrap("x", [sys.executable, "-c", hello]), check=True, timeout=60)
            assert listen.communicate(timeout=60)[0].strip() == b"hi"
        finally:
            listen.kill()
        qdisc = subprocess.run(link.wrap("x", ["tc", "qdisc", "show", "dev", slowlink.IFACE]),
                               capture_output=True, text=True).stdout  # fmt: skip
        assert "tbf" in qdisc and "50Mbit" in qdisc
        assert link.sent_bytes() > 0
    assert link.prefix not in namespaces()


@needs_netns
def test_a_failed_setup_removes_what_it_made(monkeypatch):
    link = slowlink.SlowLink(["x"], rate="not-a-rate")
    with pytest.raises(subprocess.CalledProcessError):
        link.__enter__()
    assert link.prefix not in namespaces()


@needs_netns
@pytest.mark.slow
def test_benchmark_runs_diloco_and_data_parallel_over_the_slow_link(capsys):
    bench = load_bench("diloco_bench")
    tiny = ["--steps", "20", "--sync-every", "10", "--d-model", "32", "--layers", "1"]
    assert bench.main(tiny) == 0
    out = capsys.readouterr().out
    for line in ("bytes ratio", "loss ratio", "wall ratio", "data parallel:", "DiLoCo:"):
        assert line in out
