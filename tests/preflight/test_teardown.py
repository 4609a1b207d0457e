"""`runner preflight RUN` on failure: failing nodes named, teardown offered."""

from __future__ import annotations

import pytest

from runner.kube import ExecResult
from runner.preflight.rows import FAIL, PASS, Row
from tests.preflight.conftest import invoke


def canned(bad_pod: str):
    """Pods answer with recorded rows; `bad_pod` reports an Xid 79."""

    def handler(namespace, pod, command, container, stdin):
        node = command[command.index("--node") + 1]
        rows = [Row("matmul", PASS, "ok", pod, node)]
        if pod == bad_pod:
            rows.append(
                Row("xid", FAIL, "Xid 79: GPU has fallen off the bus on 0000:b3:00", pod, node)
            )
        out = "\n".join(r.to_json() for r in rows) + "\n"
        return ExecResult(1 if pod == bad_pod else 0, out.encode(), b"")

    return handler


@pytest.fixture
def failing(cluster):
    cluster.exec_handler = canned("tiny-lm-worker-1")
    return cluster


def rayjob_exists(kube) -> bool:
    return ("ray.io/v1", "RayJob", "research", "tiny-lm") in kube.objects


def test_yes_tears_down_and_names_node(failing):
    result = invoke(["preflight", "tiny-lm", "--yes"])
    assert result.exit_code == 1
    assert "failing node(s): node-tiny-lm-worker-1" in result.stderr
    assert "deleted RayJob/tiny-lm" in result.stderr
    assert "Xid 79" in result.stdout
    assert not rayjob_exists(failing)


def test_no_keeps_the_run(failing):
    result = invoke(["preflight", "tiny-lm", "--no"])
    assert result.exit_code == 1
    assert "kept RayJob/tiny-lm" in result.stderr
    assert rayjob_exists(failing)


@pytest.mark.parametrize(("answer", "kept"), [("y\n", False), ("n\n", True), ("\n", True)])
def test_interactive_answer(failing, answer, kept):
    result = invoke(["preflight", "tiny-lm", "-n", "research"], input=answer)
    assert result.exit_code == 1
    assert "Tear down RayJob/tiny-lm so its GPUs are freed? [y/N]" in result.stdout
    assert rayjob_exists(failing) is kept


def test_no_answer_without_terminal_keeps(failing):
    result = invoke(["preflight", "tiny-lm"], input="")
    assert result.exit_code == 1 and rayjob_exists(failing)


def test_passing_run_asks_nothing(cluster):
    cluster.exec_handler = canned("nobody")
    result = invoke(["preflight", "tiny-lm"])
    assert result.exit_code == 0
    assert "Tear down" not in result.stdout and rayjob_exists(cluster)


def test_pod_without_rows_is_an_exec_failure(cluster):
    cluster.exec_handler = lambda *a: ExecResult(127, b"", b"python: not found\n")
    result = invoke(["preflight", "tiny-lm", "--no"])
    assert result.exit_code == 1
    assert "python: not found" in result.stdout


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["preflight"], 2, "give a RUN, or --local (not both)"),
        (["preflight", "tiny-lm", "--local"], 2, "give a RUN, or --local (not both)"),
        (["preflight", "nope"], 4, "error: run 'nope' not found in any namespace"),
        (["preflight", "tiny-lm", "--port", "80"], 2, "Invalid value for '--port'"),
        (["preflight", "tiny-lm", "--wait", "-1"], 2, "Invalid value for '--wait'"),
        (["preflight", "tiny-lm", "-o", "xml"], 2, "Invalid value for '-o' / '--output'"),
        (
            ["preflight", "--local", "--skip", "gpu"],
            2,
            "Invalid value for '--skip': unknown group(s) ['gpu']",
        ),
    ],
)
def test_bad_arguments(cluster, args, code, message):
    result = invoke(args)
    assert result.exit_code == code
    assert message in result.stderr and result.stderr.count("\n") == 1
    if code == 2:
        assert result.stderr.startswith("error: command line: ")
        assert result.stderr.endswith("(see runner preflight --help)\n")


def test_conclude_for_other_commands(failing, capsys):
    """What `runner submit --apply` calls after preflight_run."""
    from runner.commands.preflight import conclude
    from runner.preflight.remote import preflight_run

    rows = preflight_run(failing, "research", "tiny-lm")
    assert conclude(failing, "research", "tiny-lm", rows, teardown=False) is False
    out, err = capsys.readouterr()
    assert "Xid 79" in out and "failing node(s): node-tiny-lm-worker-1" in err
    assert "kept RayJob/tiny-lm" in err and rayjob_exists(failing)
    assert conclude(failing, "research", "tiny-lm", rows, teardown=True) is False
    assert not rayjob_exists(failing)
    passing = [r for r in rows if r.result != FAIL]
    assert conclude(failing, "research", "tiny-lm", passing, teardown=None) is True


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_rows_as_data(failing, output):
    import json

    import yaml

    result = invoke(["preflight", "tiny-lm", "--no", "-o", output])
    rows = json.loads(result.stdout) if output == "json" else yaml.safe_load(result.stdout)
    assert {(r["pod"], r["check"], r["result"]) for r in rows} >= {
        ("tiny-lm-worker-1", "xid", FAIL),
        ("tiny-lm-worker-0", "matmul", PASS),
    }
