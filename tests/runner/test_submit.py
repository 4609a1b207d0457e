"""`runner submit`: GitOps staging on a branch, the printed fallback, and --apply."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from catalog import exitcodes, labels
from runner.commands import submit as submit_module
from runner.kube import KubeError
from runner.kube.fake import FakeKube
from tests.runner.conftest import IMAGE
from tests.runner.test_cli import run_cli

FLAGS = [
    "my-run",
    "rayjob",
    "--cluster",
    "ultra-usc1",
    "--namespace",
    "research",
    "--pods",
    "2",
    "--gpus",
    "8",
    "--cpus",
    "80",
    "--memory",
    "512Gi",
    "--accelerators",
    "H200",
    "--docker-image",
    IMAGE,
    "--working-dir",
    "/workspace",
    "--env",
    "runs/env/research.yaml",
    "--preemptible",
    "--cmd",
    "python train.py --steps 10",
]


def git(root, *args) -> str:
    return subprocess.run(
        ["git", *args], cwd=root, check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def git_repo(repo):
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    return repo


def test_submit_from_flags_stages_a_branch_and_leaves_the_tree_alone(git_repo, capsys):
    (git_repo / "notes.txt").write_text("uncommitted work\n")
    head = git(git_repo, "rev-parse", "HEAD")
    status = git(git_repo, "status", "--porcelain")
    code, out, _ = run_cli(["submit", *FLAGS], capsys)
    assert code == exitcodes.OK, out
    assert out.splitlines()[0] == "my-run: 2 pods × 8 H200 GPUs = 16 GPUs, 160 CPUs, 1 TiB"
    assert "on branch run/my-run" in out and "git push -u origin run/my-run" in out
    files = git(git_repo, "show", "--name-only", "--format=", "run/my-run").splitlines()
    assert files == ["apps/ultra-usc1/research/my-run.yaml", "runs/ultra-usc1/research/my-run.yaml"]
    assert git(git_repo, "rev-parse", "HEAD") == head
    assert git(git_repo, "branch", "--show-current") == "main"
    assert git(git_repo, "status", "--porcelain") == status
    assert (git_repo / "notes.txt").read_text() == "uncommitted work\n"
    definition = yaml.safe_load(
        git(git_repo, "show", "run/my-run:runs/ultra-usc1/research/my-run.yaml")
    )
    assert definition["cpus"] == "80" and definition["preemptible"] is True
    assert definition["env_file"] == "runs/env/research.yaml"
    apps = git(git_repo, "show", "run/my-run:apps/ultra-usc1/research/my-run.yaml")
    assert apps.startswith("# Rendered by runner from runs/ultra-usc1/research/my-run.yaml")
    git(git_repo, "stash", "-u")  # the branch checks out cleanly and passes the check
    git(git_repo, "switch", "-q", "run/my-run")
    assert run_cli(["render", "--check"], capsys)[0] == exitcodes.OK
    git(git_repo, "switch", "-q", "main")
    code, out, _ = run_cli(["submit", *FLAGS, "--pods", "3"], capsys)
    assert code == 0
    assert git(git_repo, "rev-list", "--count", "run/my-run") == "3"


def test_submit_outside_git_prints_the_commands(repo, capsys):
    code, out, _ = run_cli(["submit", *FLAGS], capsys)
    assert code == 0
    assert out.splitlines()[1] == (
        "wrote runs/ultra-usc1/research/my-run.yaml, apps/ultra-usc1/research/my-run.yaml"
    )
    assert "  git switch -c run/my-run" in out
    assert (
        "  git add runs/ultra-usc1/research/my-run.yaml apps/ultra-usc1/research/my-run.yaml" in out
    )
    assert (repo / "apps/ultra-usc1/research/my-run.yaml").is_file()


def test_submit_file_without_flags_writes_only_apps(repo, capsys):
    run = repo / "runs" / "lm.yaml"
    run.write_text(
        yaml.safe_dump(
            {
                "name": "lm",
                "type": "rayjob",
                "cluster": "ultra-usc1",
                "namespace": "research",
                "accelerator": "H200",
                "image": IMAGE,
                "train_config": "runs/train/tiny-lm.yaml",
            }
        )
    )
    code, out, _ = run_cli(
        ["submit", "-f", str(run), "--no-stage", "--resume", "gs://b/research/lm/step-9"], capsys
    )
    assert code == 0
    written = yaml.safe_load((repo / "runs/ultra-usc1/research/lm.yaml").read_text())
    assert written["resume"] == "gs://b/research/lm/step-9"
    text = (repo / "apps/ultra-usc1/research/lm.yaml").read_text()
    assert "checkpoint.resume=gs://b/research/lm/step-9" in text
    # the run now lives in runs/ultra-usc1/research/lm.yaml; the old file may not reuse its name
    code, _, err = run_cli(["submit", "-f", str(run), "--no-stage"], capsys)
    assert code == exitcodes.USAGE and "run 'lm' already exists in ultra-usc1/research" in err


def test_submit_dry_run_writes_nothing(repo, capsys):
    code, out, _ = run_cli(["submit", *FLAGS, "--dry-run"], capsys)
    assert code == 0 and "dry run" in out
    assert not list(repo.rglob("my-run.yaml"))


def test_submit_bad_type_and_missing_name(repo, capsys):
    code, _, err = run_cli(["submit", "x", "pod"], capsys)
    assert err == (
        "error: command line: TYPE: Input should be 'rayjob', 'raycluster' or 'job' (and 3 more)\n"
    )
    code, _, err = run_cli(["submit"], capsys)
    assert code == exitcodes.USAGE and "give NAME TYPE and flags" in err
    code, _, err = run_cli(["submit", "x", "job", "--cluster", "ultra-usc1"], capsys)
    assert code == exitcodes.USAGE and "command line: --namespace: required key is missing" in err


def test_apply_through_the_adapter(repo, monkeypatch, capsys):
    fake = FakeKube()

    def give_uid(kube, verb, obj):
        if verb == "apply" and obj["kind"] == "RayCluster":
            key = (
                obj["apiVersion"],
                obj["kind"],
                obj["metadata"]["namespace"],
                obj["metadata"]["name"],
            )
            kube.objects[key]["metadata"]["uid"] = "uid-1"

    fake.reactors.append(give_uid)
    monkeypatch.setattr(submit_module, "get_kube", lambda cluster: fake)
    argv = [
        "submit",
        "dev",
        "raycluster",
        "--cluster",
        "ultra-usc1",
        "-n",
        "research",
        "--accelerator",
        "H200",
        "--gpus",
        "2",
        "--image",
        IMAGE,
        "--apply",
        "--no-preflight",
    ]
    code, out, _ = run_cli(argv, capsys)
    assert code == 0, out
    assert (
        "applied RayCluster research/dev" in out
        and "applied Deployment research/dev-sentinel" in out
    )
    sentinel = fake.get("apps/v1", "Deployment", "research", "dev-sentinel")
    assert sentinel["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert fake.list("ray.io/v1", "RayCluster", "research", {labels.RUN: "dev"})
    assert not list((repo / "apps").rglob("*.yaml"))


def test_apply_failure_is_exit_1(repo, monkeypatch, capsys):
    def refuse(cluster):
        raise KubeError("no Kubernetes credentials")

    monkeypatch.setattr(submit_module, "get_kube", refuse)
    code, _, err = run_cli(["submit", *FLAGS, "--apply"], capsys)
    assert code == exitcodes.FAILURE and "no Kubernetes credentials" in err


def test_the_documented_command_shape(repo, capsys):
    """`runner submit NAME rayjob --cluster C --namespace TEAM --pods 2 --gpus 8 --cpus 80
    --memory 512Gi --accelerators H200 --docker-image IMAGE --working-dir DIR --env ENV.yaml
    --preemptible --cmd '...'`, exactly."""
    code, out, _ = run_cli(["submit", *FLAGS, "--no-stage"], capsys)
    assert code == exitcodes.OK
    assert out.splitlines()[0] == "my-run: 2 pods × 8 H200 GPUs = 16 GPUs, 160 CPUs, 1 TiB"
    docs = list(yaml.safe_load_all((repo / "apps/ultra-usc1/research/my-run.yaml").read_text()))
    configmap, job = docs
    assert configmap["data"]["WANDB_PROJECT"] == "tiny-lm"
    assert job["spec"]["entrypoint"] == "python train.py --steps 10"
    group = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    pod = group["template"]["spec"]
    container = pod["containers"][0]
    assert group["replicas"] == 2 and container["image"] == IMAGE
    assert container["workingDir"] == "/workspace"
    assert container["resources"]["requests"] == {
        "cpu": "80",
        "memory": "512Gi",
        "nvidia.com/gpu": "8",
    }
    assert pod["priorityClassName"] == labels.PRIORITY_PREEMPTIBLE


def test_submit_refuses_an_env_file_outside_the_repository(repo, tmp_path_factory, capsys):
    outside = tmp_path_factory.mktemp("elsewhere") / "env.yaml"
    outside.write_text("A: b\n")
    flags = [f if f != "runs/env/research.yaml" else str(outside) for f in FLAGS]
    code, _, err = run_cli(["submit", *flags, "--no-stage"], capsys)
    assert code == exitcodes.USAGE
    assert err == (
        f"error: command line: --env: {outside} is outside the repository; a committed run "
        "needs a committed env file (e.g. under runs/env/)\n"
    )
    assert not list((repo / "apps").rglob("*.yaml"))


def test_a_failing_git_is_one_line_and_exit_1(git_repo, capsys):
    (git_repo / ".git" / "refs" / "heads" / "run").write_text("not a folder\n")
    code, out, err = run_cli(["submit", *FLAGS], capsys)
    assert code == exitcodes.FAILURE
    assert err.startswith("error: git update-ref refs/heads/run/my-run ") and err.count("\n") == 1
    assert not (git_repo / "apps/ultra-usc1/research/my-run.yaml").exists()


def _applied_with_preflight(monkeypatch, rows, extra, capsys):
    """`submit --apply` on a fake cluster whose preflight returns `rows`."""
    from runner.preflight import remote

    fake = FakeKube()
    calls = []

    def fake_preflight(kube, namespace, run, **kwargs):
        calls.append((kube, namespace, run, kwargs))
        return rows

    monkeypatch.setattr(submit_module, "get_kube", lambda cluster: fake)
    monkeypatch.setattr(remote, "preflight_run", fake_preflight)
    code, out, err = run_cli(["submit", *FLAGS, "--apply", *extra], capsys)
    return fake, calls, code, out, err


def test_apply_runs_preflight_after_placement(repo, monkeypatch, capsys):
    from runner.preflight.rows import PASS, Row

    rows = [Row("matmul", PASS, "612 TFLOP/s", "my-run-worker-0", "gke-node-1")]
    fake, calls, code, out, _ = _applied_with_preflight(
        monkeypatch, rows, ["--preflight-wait", "60"], capsys
    )
    assert code == exitcodes.OK, out
    assert calls == [(fake, "research", "my-run", {"placement_timeout": 60.0})]
    assert "612 TFLOP/s" in out


@pytest.mark.parametrize(("answer", "kept"), [("--no", True), ("--yes", False)])
def test_failed_preflight_is_exit_1_and_offers_teardown(repo, monkeypatch, capsys, answer, kept):
    from runner.preflight.rows import FAIL, Row

    rows = [Row("xid", FAIL, "Xid 79: GPU has fallen off the bus", "my-run-worker-1", "gke-n7")]
    fake, _, code, _, err = _applied_with_preflight(monkeypatch, rows, [answer], capsys)
    assert code == exitcodes.FAILURE
    assert "failing node(s): gke-n7" in err
    left = fake.list("ray.io/v1", "RayJob", "research", {labels.RUN: "my-run"})
    assert bool(left) is kept


def test_no_preflight_skips_it(repo, monkeypatch, capsys):
    fake, calls, code, _, _ = _applied_with_preflight(monkeypatch, [], ["--no-preflight"], capsys)
    assert code == exitcodes.OK and calls == []
