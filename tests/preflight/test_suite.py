"""The suite end to end on CPU: `runner preflight --local`, the in-pod entry point, and
`runner preflight RUN` against a fake cluster whose exec runs local processes."""

from __future__ import annotations

import json

import pytest

from runner.preflight import entry
from runner.preflight.remote import NotPlaced, plan, preflight_run
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


def test_run_preflight_across_two_pods(cluster):
    # matmul and the kernel log have their own tests; the pods' processes stay light
    rows = preflight_run(cluster, "research", "tiny-lm", port=29617, skip="matmul,kernel")
    pods = {r.pod for r in rows if r.pod}
    assert pods == {"tiny-lm-worker-0", "tiny-lm-worker-1"}  # the head is not checked
    world = [r for r in rows if r.check == "allreduce-world"]
    assert len(world) == 1 and world[0].pod == "tiny-lm-worker-0" and world[0].result == PASS
    assert world[0].data["slowest_node"] in {"node-tiny-lm-worker-0", "node-tiny-lm-worker-1"}
    assert {r.check for r in rows} >= {"same-driver-version", "same-cuda-version", "shm"}
    assert not {"matmul", "xid"} & {r.check for r in rows}
    assert not [r for r in rows if r.result == FAIL]
    execs = [c for c in cluster.calls if c[0] == "exec"]
    assert {c[2] for c in execs} == {"tiny-lm-worker-0", "tiny-lm-worker-1"}


def test_pending_pods_are_not_preflighted(cluster):
    cluster.apply(pod("tiny-lm-worker-2", "worker", phase="Pending"))
    with pytest.raises(NotPlaced, match="1 of 3 pods are not running yet"):
        preflight_run(cluster, "research", "tiny-lm")
    result = invoke(["preflight", "tiny-lm"])
    assert result.exit_code == 1
    assert result.stderr.strip().startswith("error: 1 of 3 pods are not running yet")
