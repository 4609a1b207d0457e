"""The suite end to end on CPU: `runner preflight --local`, the in-pod entry point, and
`runner preflight RUN` against a fake cluster whose exec runs local processes."""

from __future__ import annotations

import json

import pytest

from runner.preflight import entry
from runner.preflight.remote import NotPlaced, plan, preflight_run, wait_for_pods
from runner.preflight.rows import FAIL, PASS, SKIP
from tests.preflight.conftest import invoke, pod


def test_local_suite_with_two_process_allreduce():
    result = invoke(["preflight", "--local", "-o", "json"])
    assert result.exit_code == 0, result.stderr
    rows = {r["check"]: r for r in json.loads(result.stdout)}
    assert rows["allreduce-world"]["result"] == PASS
    assert rows["allreduce-world"]["data"]["slowest_rank"] in (0, 1)
    assert "2 ranks" in rows["allreduce-world"]["detail"]
    assert rows["allreduce"]["detail"].startswith("ranks 0-1:")
    assert rows["matmul"]["result"] in (PASS, "WARN")  # a busy machine may be slow, never wrong
    assert "float32" in rows["matmul"]["detail"]
    for check in ("nvidia-smi", "ecc", "mounts", "libraries", "nccl-env", "nics"):
        assert (rows[check]["result"], rows[check]["detail"]) == (SKIP, "no GPU")


def test_entry_point_prints_table_and_skips_groups(capsys):
    code = entry.main(["--skip", "matmul,allreduce,kernel", "--pod", "p1", "--node", "n1"])
    out = capsys.readouterr().out
    assert code == 0
    assert out.splitlines()[0].split() == ["POD", "NODE", "CHECK", "RESULT", "DETAIL"]
    assert "p1   n1    memory" in out and "matmul" not in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--skip", "bogus"], "--skip: unknown group(s) ['bogus']"),
        (["--master-addr", "10.0.0.1"], "--world-size is required with --master-addr"),
    ],
)
def test_entry_point_bad_arguments(argv, message, capsys):
    with pytest.raises(SystemExit) as stop:
        entry.main(argv)
    assert stop.value.code == 2
    assert message in capsys.readouterr().err


def test_entry_point_unknown_accelerator(capsys):
    assert entry.main(["--accelerator", "A100", "--skip", "matmul,allreduce"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: --accelerator: unknown accelerator 'A100' (known: H100, H200)"


def test_plan_numbers_ranks_pod_by_pod():
    pods = [pod("w0", "worker", gpus=8, ip="10.4.0.7"), pod("w1", "worker", gpus=8, ip="10.4.0.9")]
    plans = plan(pods, port=29600)
    first, second = plans[0].command, plans[1].command
    for command in (first, second):
        assert command[:3] == ["python", "-m", "runner.preflight"]
        assert command[command.index("--master-addr") + 1] == "10.4.0.7"
        assert command[command.index("--world-size") + 1] == "16"
        assert command[command.index("--accelerator") + 1] == "H200"
        assert command[command.index("--shm") + 1] == "250Gi"
    assert first[first.index("--rank-base") + 1] == "0"
    assert second[second.index("--rank-base") + 1] == "8"
    assert second[second.index("--local-procs") + 1] == "8"
    assert plans[1].container == "ray-worker"


def _checks_of(rows, pod_name):
    return {r.check for r in rows if r.pod == pod_name}


def test_run_preflight_execs_the_entry_point_in_every_worker(cluster):
    # the real command line, entry point and JSON rows, without torch: no matmul, no collective
    rows = preflight_run(cluster, "research", "tiny-lm", skip="matmul,allreduce")
    assert {r.pod for r in rows if r.pod} == {"tiny-lm-worker-0", "tiny-lm-worker-1"}
    for name in ("tiny-lm-worker-0", "tiny-lm-worker-1"):
        assert {"xid", "nvidia-smi", "memory", "shm", "nccl-env"} <= _checks_of(rows, name)
        assert {r.node for r in rows if r.pod == name} == {f"node-{name}"}
    assert [r.check for r in rows[-2:]] == ["same-driver-version", "same-cuda-version"]
    assert not [r for r in rows if r.result == FAIL]
    execs = [c for c in cluster.calls if c[0] == "exec"]
    assert sorted(c[2] for c in execs) == ["tiny-lm-worker-0", "tiny-lm-worker-1"]


@pytest.mark.slow
def test_run_preflight_across_two_pods(cluster):
    # each pod imports torch for a one-rank gloo process; the local test covers 2 processes
    rows = preflight_run(cluster, "research", "tiny-lm", port=29617, skip="matmul,kernel")
    pods = {r.pod for r in rows if r.pod}
    assert pods == {"tiny-lm-worker-0", "tiny-lm-worker-1"}  # the head is not checked
    world = [r for r in rows if r.check == "allreduce-world"]
    assert len(world) == 1 and world[0].pod == "tiny-lm-worker-0" and world[0].result == PASS
    assert world[0].data["slowest_node"] in {"node-tiny-lm-worker-0", "node-tiny-lm-worker-1"}
    assert "2 ranks" in world[0].detail
    assert not [r for r in rows if r.result == FAIL]


def test_pending_pods_are_not_preflighted(cluster):
    cluster.apply(pod("tiny-lm-worker-2", "worker", phase="Pending"))
    with pytest.raises(NotPlaced, match="1 of 3 pods are not running yet"):
        preflight_run(cluster, "research", "tiny-lm")
    result = invoke(["preflight", "tiny-lm"])
    assert result.exit_code == 1
    assert result.stderr.strip().startswith("error: 1 of 3 pods are not running yet")


def test_waits_for_placement(cluster):
    cluster.apply(pod("tiny-lm-worker-2", "worker", phase="Pending"))
    naps = []

    def sleep(seconds):  # the scheduler places the pod during the second nap
        naps.append(seconds)
        if len(naps) == 2:
            cluster.apply(pod("tiny-lm-worker-2", "worker"))

    pods = wait_for_pods(cluster, "research", "tiny-lm", timeout=60, poll=5, sleep=sleep)
    assert naps == [5, 5] and len(pods) == 3


def test_wait_gives_up_after_the_timeout(cluster, monkeypatch):
    cluster.apply(pod("tiny-lm-worker-2", "worker", phase="Pending"))
    clock = [0.0]
    monkeypatch.setattr("runner.preflight.remote.time.monotonic", lambda: clock[0])

    def sleep(seconds):
        clock[0] += seconds

    with pytest.raises(NotPlaced, match="not running yet"):
        wait_for_pods(cluster, "research", "tiny-lm", timeout=30, poll=10, sleep=sleep)
    assert clock[0] == 30


@pytest.mark.parametrize("phase", ["Failed", "Succeeded"])
def test_ended_pods_stop_the_wait(cluster, phase):
    cluster.apply(pod("tiny-lm-worker-2", "worker", phase=phase))
    with pytest.raises(NotPlaced, match="pod tiny-lm-worker-2 of run tiny-lm has already ended"):
        wait_for_pods(cluster, "research", "tiny-lm", timeout=600, sleep=pytest.fail)


def test_run_without_workers_is_not_placed(cluster):
    for name in ("tiny-lm-worker-0", "tiny-lm-worker-1"):
        cluster.delete("v1", "Pod", "research", name)
    with pytest.raises(NotPlaced, match="run tiny-lm has no worker pods in namespace research"):
        preflight_run(cluster, "research", "tiny-lm")
