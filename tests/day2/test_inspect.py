"""`runner list`, `status`, `describe` and `logs` against the fake cluster."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.day2.conftest import invoke


def test_list_all_namespaces(fake):
    result = invoke(["list"])
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["NAMESPACE", "RUN", "TEAM", "TYPE", "STATE", "PODS", "AGE"]
    assert lines[1].split()[:6] == ["media", "sweep", "media", "job", "Running", "2/2"]
    assert lines[2].split()[:6] == ["research", "tiny-lm", "research", "rayjob", "Running", "3/3"]


def test_list_one_namespace_as_json(fake):
    result = invoke(["list", "-n", "research", "-o", "json"])
    runs = json.loads(result.stdout)
    assert [(r["run"], r["kind"], r["state"]) for r in runs] == [("tiny-lm", "RayJob", "Running")]


def test_list_empty_namespace(fake):
    result = invoke(["list", "-n", "nobody"])
    assert result.exit_code == 0 and "no runs found" in result.stderr


def test_status_table(fake):
    result = invoke(["status", "tiny-lm"])
    assert result.exit_code == 0
    assert result.stdout.startswith("run tiny-lm in research: RayJob tiny-lm Running")
    assert "tiny-lm-worker-b   worker   Running   gke-h200-2   0" in result.stdout


def test_status_yaml(fake):
    data = yaml.safe_load(invoke(["status", "sweep", "-o", "yaml"]).stdout)
    assert data["kind"] == "Job" and data["namespace"] == "media"
    assert {p["pod"]: p["restarts"] for p in data["pods"]} == {"sweep-0-yy": 0, "sweep-1-zz": 2}


@pytest.mark.parametrize(
    ("args", "first"),
    [
        (["list"], "NAMESPACE   RUN       TEAM       TYPE     STATE     PODS   AGE"),
        (["status", "sweep"], "run sweep in media: Job sweep Running"),
        (["describe", "sweep"], "Run:        sweep"),
    ],
)
def test_every_output_format(fake, args, first):
    table = invoke([*args, "-o", "table"])
    assert table.exit_code == 0 and table.stdout.startswith(first)
    as_json = json.loads(invoke([*args, "-o", "json"]).stdout)
    as_yaml = yaml.safe_load(invoke([*args, "--output", "yaml"]).stdout)
    assert as_json == json.loads(json.dumps(as_yaml, default=str)) and as_json


def test_describe_shows_events_of_the_run_only(fake):
    result = invoke(["describe", "tiny-lm", "-n", "research"])
    assert result.exit_code == 0
    assert "RayCluster/tiny-lm-raycluster-x7q2b  ready" in result.stdout
    assert "Pulled" in result.stdout and "Created" in result.stdout
    assert "not ours" not in result.stdout
    data = json.loads(invoke(["describe", "tiny-lm", "-o", "json"]).stdout)
    assert [e["reason"] for e in data["events"]] == ["Created", "Pulled"]
    assert len(data["pods"]) == 3


@pytest.mark.parametrize(
    "command",
    ["status", "describe", "logs", "delete", "diagnose", "port-forward", "shell", "preflight"],
)
def test_missing_run_exits_4(fake, command):
    result = invoke([command, "nope", "-n", "research"])
    assert result.exit_code == 4
    assert result.stderr.strip() == "error: run 'nope' not found in namespace research"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["logs", "tiny-lm"], "driver: step 1\ndriver: step 2\ndriver: done\n"),
        (["logs", "tiny-lm", "--tail", "1"], "driver: done\n"),
        (["logs", "tiny-lm", "--rank", "1"], "worker b line\n"),
        (["logs", "tiny-lm", "--pod", "tiny-lm-worker-a"], "worker a line\n"),
        (["logs", "sweep", "--rank", "1"], "index 1\n"),
        (["logs", "sweep", "--rank", "0", "-c", "main"], "index 0\n"),
        (["logs", "sweep", "--all"], "[sweep-0-yy] index 0\n[sweep-1-zz] index 1\n"),
    ],
)
def test_logs(fake, args, expected):
    result = invoke(args)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == expected


def test_logs_follow_and_previous_reach_the_adapter(fake):
    invoke(["logs", "sweep", "--rank", "1", "-f", "-p"])
    assert ("logs", "media", "sweep-1-zz", None, True, None, True) in fake.calls


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (
            ["logs", "tiny-lm", "--rank", "5"],
            4,
            "error: run 'tiny-lm' has no rank 5 (2 worker pods)",
        ),
        (["logs", "tiny-lm", "--pod", "other"], 4, "error: pod 'other' is not part of run"),
        (["logs", "tiny-lm", "-c", "sidecar"], 1, "error: container sidecar is not valid"),
        (["logs", "tiny-lm", "--rank", "0", "--pod", "x"], 2, "choose one of --rank, --pod"),
        (["logs", "tiny-lm", "--all", "-f"], 2, "--follow works on one pod"),
        (["logs", "tiny-lm", "--rank", "-1"], 2, "--rank"),
        (["list", "-o", "xml"], 2, "'xml' is not one of"),
        (["status"], 2, "Missing argument 'RUN'"),
        (["describe", "tiny-lm", "--bogus"], 2, "No such option '--bogus'"),
        (["delete", "tiny-lm", "extra"], 2, "Got unexpected extra argument (extra)"),
        (["diagnose", "tiny-lm", "--tail", "0"], 2, "Invalid value for '--tail'"),
        (["port-forward", "tiny-lm", "--rank", "x"], 2, "Invalid value for '--rank'"),
    ],
)
def test_bad_arguments(fake, args, code, message):
    result = invoke(args)
    assert result.exit_code == code
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert message in result.stderr
    if code == 2:
        assert result.stderr.startswith("error: command line: ")
        assert result.stderr.endswith(f"(see runner {args[0]} --help)\n")


def test_no_credentials_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    result = invoke(["list"])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: no Kubernetes credentials")
    assert len(result.stderr.strip().splitlines()) == 1
