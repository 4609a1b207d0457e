"""`runner delete`, `shell`, `cp`, `port-forward`, `diagnose` and shell completion."""

from __future__ import annotations

import getpass
import os
import socket
import subprocess
import sys
import tarfile
import threading

import click
import pytest

from catalog import labels
from tests.day2.conftest import invoke

IMAGE = "us-docker.pkg.dev/reve-train-ultra/training/trainer@sha256:" + "cd" * 32


def kinds(fake, namespace: str) -> set[str]:
    return {k[1] for k in fake.objects if k[2] == namespace}


def test_delete_with_yes(fake):
    result = invoke(["delete", "tiny-lm", "--yes"])
    assert result.exit_code == 0, result.stderr
    assert "deleted RayJob/tiny-lm" in result.stdout
    assert "deleted RayCluster/tiny-lm-raycluster-x7q2b" in result.stdout
    assert "ArgoCD manages run tiny-lm" in result.stderr
    assert not {"RayJob", "RayCluster"} & kinds(fake, "research")
    assert "Job" in kinds(fake, "media")  # other runs untouched


def test_delete_asks(fake):
    result = invoke(["delete", "sweep"], input="n\n")
    assert result.exit_code == 1 and "aborted" in result.stderr
    assert "Delete run sweep in media (Job/sweep)? [y/N]" in result.stdout
    assert "Job" in kinds(fake, "media")
    result = invoke(["delete", "sweep"], input="y\n")
    assert result.exit_code == 0 and "deleted Job/sweep" in result.stdout
    assert "ArgoCD" not in result.stderr


def test_shell_runs_a_command_in_a_rank(fake):
    result = invoke(["shell", "tiny-lm", "--rank", "1", "--", "echo", "hello"])
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "hello\n"
    assert ("exec", "research", "tiny-lm-worker-b", ("echo", "hello"), None) in fake.calls


def test_shell_feeds_stdin_and_returns_exit_status(fake):
    result = invoke(
        ["shell", "sweep", "--", "sh", "-c", "read x; echo got $x; exit 3"], input="line\n"
    )
    assert result.stdout == "got line\n" and result.exit_code == 3


def test_shell_default_is_a_login_shell(fake):
    invoke(["shell", "tiny-lm"], input="exit 0\n")
    command = next(c for c in fake.calls if c[0] == "exec")[3]
    assert command[:2] == ("sh", "-c") and "bash" in command[2]


def dev_pod_reactor(fake, verb, obj):
    """Play the Job controller: a dev Job gets a running pod."""
    if verb == "apply" and obj["kind"] == "Job" and obj["metadata"]["name"].startswith("dev-"):
        meta = obj["metadata"]
        template = obj["spec"]["template"]
        fake.objects[("v1", "Pod", meta["namespace"], meta["name"] + "-p0")] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": meta["name"] + "-p0",
                "namespace": meta["namespace"],
                "labels": template["metadata"]["labels"],
            },
            "spec": template["spec"],
            "status": {"phase": "Running"},
        }


def test_shell_dev_job(fake, monkeypatch):
    monkeypatch.setattr("runner.commands.shell.POLL_SECONDS", 0)
    fake.reactors.append(dev_pod_reactor)
    result = invoke(
        [
            "shell",
            "--dev",
            "alice",
            "--cluster",
            "ultra-usc1",
            "-n",
            "research",
            "--image",
            IMAGE,
            "--accelerator",
            "H200",
            "--gpus",
            "2",
            "--",
            "echo",
            "in",
        ]
    )
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "in\n" and "dev pod dev-alice-p0" in result.stderr
    job = fake.objects[("batch/v1", "Job", "research", "dev-alice")]
    spec = job["spec"]["template"]["spec"]
    assert spec["nodeSelector"][labels.GKE_ACCELERATOR] == "nvidia-h200-141gb"
    assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert spec["containers"][0]["image"] == IMAGE
    assert job["metadata"]["labels"][labels.RUN] == "dev-alice"
    assert job["metadata"]["labels"][labels.KUEUE_QUEUE_LABEL] == labels.LOCAL_QUEUE
    assert invoke(["delete", "dev-alice", "-y"]).exit_code == 0


def test_dev_job_passes_schema_validation():
    from catalog import load_cluster
    from runner.commands.shell import dev_context
    from runner.templating import render_template
    from runner.validation.manifests import validate_manifests

    for accelerator in ("H200", None):
        ctx = dev_context("dev-bob", "research", "ultra-usc1", IMAGE, accelerator, 8, 8)
        docs = render_template("dev-job.yaml.j2", dev=ctx)
        validate_manifests(docs, load_cluster("ultra-usc1").kubernetes_version, "dev-job.yaml.j2")


def test_dev_job_image_defaults_to_the_trainer_image(fake, monkeypatch):
    monkeypatch.setattr("runner.commands.shell.POLL_SECONDS", 0)
    fake.reactors.append(dev_pod_reactor)
    args = ["shell", "--dev", "--cluster", "ultra-usc1", "-n", "research", "--", "echo", "hi"]
    result = invoke(args)
    assert result.exit_code == 0 and result.stdout == "hi\n"
    job = fake.objects[("batch/v1", "Job", "research", "dev-" + getpass.getuser())]
    image = job["spec"]["template"]["spec"]["containers"][0]["image"]
    from catalog import load_cluster
    from runner.nodecheck import default_image

    assert image == default_image(load_cluster("ultra-usc1"), "trainer")
    assert image.startswith("us-docker.pkg.dev/reve-train-ultra/training/trainer:")
    assert job["spec"]["template"]["spec"]["nodeSelector"] == labels.cpu_node_labels()


def test_dev_pod_that_never_runs_fails_in_time(fake, monkeypatch):
    monkeypatch.setattr("runner.commands.shell.POLL_SECONDS", 0)
    args = ["shell", "--dev", "bob", "--cluster", "ultra-usc1", "-n", "research", "--wait", "0"]
    result = invoke(args + ["--image", IMAGE])
    assert result.exit_code == 1
    assert result.stderr == (
        "error: dev pod of dev-bob not running after 0s (see `runner describe dev-bob`)\n"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["shell", "--dev", "--cluster", "ultra-usc1"], "--dev needs --cluster and -n"),
        (["shell"], "give a RUN, or --dev"),
        (
            [
                "shell",
                "--dev",
                "x",
                "--cluster",
                "mega-euw4",
                "-n",
                "r",
                "--image",
                IMAGE,
                "--accelerator",
                "H200",
            ],
            "cluster mega-euw4 has no H200 pools",
        ),
        (["shell", "--dev", "--cluster", "nowhere", "-n", "r"], "--cluster: unknown cluster"),
        (["shell", "tiny-lm", "--gpus", "9"], "Invalid value for '--gpus'"),
    ],
)
def test_shell_bad_arguments(fake, args, message):
    result = invoke(args)
    assert result.exit_code == 2
    assert message in result.stderr and result.stderr.count("\n") == 1


def test_cp_both_ways(fake, tmp_path):
    source = tmp_path / "local" / "notes"
    (source / "deep").mkdir(parents=True)
    (source / "a.txt").write_text("alpha")
    (source / "deep" / "b.txt").write_text("beta")
    remote = tmp_path / "pod-fs" / "copied"  # the fake's pods share this machine's files
    result = invoke(["cp", str(source), f"tiny-lm-head:{remote}"])
    assert result.exit_code == 0, result.stderr
    assert (remote / "deep" / "b.txt").read_text() == "beta"
    back = tmp_path / "back"
    result = invoke(["cp", f"tiny-lm-head:{remote}/a.txt", str(back), "-n", "research"])
    assert result.exit_code == 0, result.stderr
    assert back.read_text() == "alpha"


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["cp", "./a", "./b"], 2, "exactly one of SOURCE and DESTINATION"),
        (["cp", "p1:/x", "p2:/y"], 2, "exactly one of SOURCE and DESTINATION"),
        (["cp", "/no/such/file", "tiny-lm-head:/tmp/x"], 2, "no such file or folder"),
        (["cp", "ghost:/etc/hosts", "./x"], 4, "error: pod 'ghost' not found"),
        (["cp", "tiny-lm-head:/no/such/path", "./x"], 1, "error: copy from tiny-lm-head"),
    ],
)
def test_cp_bad_arguments(fake, args, code, message):
    result = invoke(args)
    assert result.exit_code == code
    assert message in result.stderr


def echo_server() -> tuple[socket.socket, int]:
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            conn.sendall(b"echo:" + conn.recv(100))

    threading.Thread(target=serve, daemon=True).start()
    return server, server.getsockname()[1]


def test_port_forward_dashboard(fake, monkeypatch):
    server, port = echo_server()
    fake.ports[("research", "tiny-lm-head", 8265)] = ("127.0.0.1", port)
    answers = []

    def use_the_tunnel() -> None:  # stands in for waiting on Ctrl-C
        local = int(seen[0].split(":")[1].split()[0])
        with socket.create_connection(("127.0.0.1", local), timeout=10) as conn:
            conn.sendall(b"ping")
            answers.append(conn.recv(100))

    seen: list[str] = []
    monkeypatch.setattr("runner.commands.port_forward.wait", use_the_tunnel)
    monkeypatch.setattr("click.echo", lambda msg=None, **kw: seen.append(str(msg)))
    result = invoke(["port-forward", "tiny-lm", ":8265"])
    server.close()
    assert result.exit_code == 0, result.stderr
    assert seen[0].startswith("Forwarding from 127.0.0.1:") and seen[0].endswith(
        "-> tiny-lm-head:8265"
    )
    assert answers == [b"echo:ping"]


@pytest.mark.parametrize("port", ["abc", "1:2:3", "70000", "0"])
def test_port_forward_bad_port(fake, port):
    result = invoke(["port-forward", "tiny-lm", port])
    assert result.exit_code == 2
    assert "is not PORT or LOCAL:REMOTE" in result.stderr or "ports are 1-65535" in result.stderr


def test_diagnose_bundle(fake, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the fake head pod's working dir is this machine's cwd
    crash = tmp_path / "outputs" / "research" / "tiny-lm" / "crash-20261130-100500"
    crash.mkdir(parents=True)
    (crash / "error.txt").write_text("RuntimeError: NCCL timeout")
    out = tmp_path / "bundle.tar.gz"
    result = invoke(["diagnose", "tiny-lm", "--out", str(out)])
    assert result.exit_code == 0, result.stderr
    assert "3 pods, 2 events" in result.stdout
    with tarfile.open(out) as tar:
        names = tar.getnames()
        root = names[0].split("/")[0]
        files = {n.removeprefix(root + "/") for n in names}
        assert {
            "summary.json",
            "objects.yaml",
            "pods.yaml",
            "events.yaml",
            "NOTES.txt",
            "logs/tiny-lm-head/ray-head.log",
            "logs/tiny-lm-worker-b/ray-worker.log",
            "crash/crash-20261130-100500/error.txt",
        } <= files
        error = tar.extractfile(f"{root}/crash/crash-20261130-100500/error.txt").read()
        assert error == b"RuntimeError: NCCL timeout"
        head = tar.extractfile(f"{root}/logs/tiny-lm-head/ray-head.log").read().decode()
        assert head.endswith("driver: done")


def test_diagnose_keeps_previous_logs_of_restarted_containers(fake, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "sweep.tar.gz"
    assert invoke(["diagnose", "sweep", "--out", str(out)]).exit_code == 0
    with tarfile.open(out) as tar:
        names = [n.split("/", 1)[1] for n in tar.getnames()]
        notes = next(n for n in tar.getnames() if n.endswith("NOTES.txt"))
        text = tar.extractfile(notes).read().decode()
    assert "logs/sweep-1-zz/main.previous.log" in names
    assert "logs/sweep-0-yy/main.previous.log" not in names
    assert "crash bundles from sweep-0-yy:outputs/media/sweep: 0" in text


def completion(env: dict) -> str:
    full = {**os.environ, **env}
    done = subprocess.run(
        [sys.executable, "-m", "runner"], env=full, capture_output=True, text=True, timeout=60
    )
    return done.stdout


def test_shell_completion():
    script = completion({"_RUNNER_COMPLETE": "bash_source"})
    assert "_runner_completion" in script and "complete -o nosort -F" in script
    words = completion(
        {"_RUNNER_COMPLETE": "bash_complete", "COMP_WORDS": "runner p", "COMP_CWORD": "1"}
    )
    assert "port-forward" in words and "preflight" in words
    options = completion(
        {"_RUNNER_COMPLETE": "bash_complete", "COMP_WORDS": "runner logs x --fo", "COMP_CWORD": "3"}
    )
    assert "--follow" in options
    assert "compdef" in completion({"_RUNNER_COMPLETE": "zsh_source"})


def test_run_names_complete_from_the_cluster(fake):
    from runner.commands._day2 import _complete_runs
    from runner.commands.status import status

    ctx = click.Context(status)
    ctx.params = {"namespace": None, "cluster": None}
    assert _complete_runs(ctx, None, "") == ["sweep", "tiny-lm"]
    assert _complete_runs(ctx, None, "ti") == ["tiny-lm"]
    ctx.params["namespace"] = "media"
    assert _complete_runs(ctx, None, "") == ["sweep"]


def test_completion_is_quiet_without_a_cluster(monkeypatch, tmp_path):
    from runner.commands._day2 import _complete_runs
    from runner.commands.status import status

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert _complete_runs(click.Context(status), None, "") == []
