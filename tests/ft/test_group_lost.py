"""A member of a replica group of several asks its group's quorum server, in the process of
the group's rank 0 (torchft's ManagerServer). When rank 0 dies, the member's quorum call
fails within milliseconds ("tcp connect error", or "transport error" when it died while the
request waited there): that is its group's failure (FtGroupLost, Ray Train replaces the
group), not the run's end (FtStopped). Found by scripts/bench/ft_bench.py --platform
--group-size 2, whose run stopped with exit 3 after a SIGKILL of a group's rank 0. A quorum
that does not form within `ft.quorum_timeout_s` still stops the run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from driver.ft.plan import quorum_failure
from tests.driver.conftest import ROOT


@pytest.mark.parametrize(
    ("group_rank", "waited_s", "want"),
    [
        (1, 0.004, "group lost"),  # rank 0's server refused the connection
        (1, 2.0, "group lost"),  # the request waited there until rank 0 died
        (1, 29.9, "group lost"),
        (1, 30.0, "stopped"),  # half the quorum timeout or more: no quorum formed
        (1, 60.0, "stopped"),
        (0, 0.004, "stopped"),  # rank 0 asks its own server: a quick failure is the Lighthouse's
        (0, 60.0, "stopped"),
        (3, 0.1, "group lost"),
    ],
)
def test_quorum_failure(group_rank, waited_s, want):
    assert quorum_failure(group_rank, waited_s, quorum_timeout_s=60.0) == want


@pytest.fixture
def group():
    """The Lighthouse and the group's store here, the two members in processes of their own;
    yields a function that starts them with a quorum timeout."""
    from torch.distributed import TCPStore

    from driver.config.ft import FtConfig
    from driver.ft.lighthouse import DriverSide

    side = DriverSide(FtConfig.from_dict({"enabled": True, "min_replicas": 1}), 1)
    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(store.port),
           "PYTHONPATH": str(ROOT)}  # fmt: skip
    procs: list[subprocess.Popen] = []

    def start(timeout_s: float) -> list[subprocess.Popen]:
        for rank in (0, 1):
            cmd = [sys.executable, "-m", "tests.ft.group_member", str(rank),
                   side.lighthouse_addr, str(timeout_s)]  # fmt: skip
            pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE}
            procs.append(subprocess.Popen(cmd, cwd=ROOT, env=env, text=True, **pipes))
        for proc in procs:
            assert proc.stdout.readline().strip() == "built"
        return procs

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()
    side.shutdown()


def ask(member: subprocess.Popen) -> None:
    member.stdin.write("go\n")
    member.stdin.flush()


def answer(member: subprocess.Popen) -> dict:
    return json.loads(member.stdout.readline())


def test_rank_0_dead_before_the_member_asks_is_its_groups_loss(group):
    rank0, member = group(timeout_s=60)
    rank0.kill()
    rank0.wait()
    ask(member)
    got = answer(member)
    assert got["raised"] == "FtGroupLost", got
    assert got["message"].startswith("ft: replica group 0 lost its rank 0")
    assert got["after_s"] < 30


def test_rank_0_dying_while_the_request_waits_there_is_its_groups_loss(group):
    rank0, member = group(timeout_s=60)
    ask(member)
    time.sleep(1.0)  # the request waits at rank 0's server, which waits for rank 0's own
    rank0.send_signal(signal.SIGKILL)
    got = answer(member)
    assert got["raised"] == "FtGroupLost", got
    assert got["after_s"] < 30


def test_a_quorum_that_never_forms_still_stops_the_run(group):
    rank0, member = group(timeout_s=2)  # rank 0 lives but never asks
    ask(member)
    got = answer(member)
    assert got["raised"] == "FtStopped", got
    assert "no quorum of ft.min_replicas=1" in got["message"]
    assert rank0.poll() is None
