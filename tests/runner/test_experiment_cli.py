"""DiLoCo experiments through the runner's commands: `render` writes one apps/ file per
cluster (all or nothing), `validate` checks, `render --check` re-renders committed
experiments, `run --local` runs the experiment's local processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from catalog import exitcodes, labels
from runner import gitops
from runner.cli import main
from runner.experiment import load_experiment, local_command
from tests.runner.conftest import IMAGE, ROOT, write_run

US, EU = "apps/ultra-usc1/research/lm-diloco.yaml", "apps/mega-euw4/research/lm-diloco.yaml"


@pytest.fixture
def exp() -> dict:
    return {
        "name": "lm-diloco",
        "namespace": "research",
        "image": IMAGE,
        "train_config": "runs/train/tiny-lm.yaml",
        "diloco": {"sync_every": 20},
        "synchronizer": {"cluster": "ultra-usc1", "host": "sync.research.example"},
        "learners": [
            {"name": "us", "cluster": "ultra-usc1", "accelerator": "H200", "pods": 1},
            {"name": "eu", "cluster": "mega-euw4", "accelerator": "H100", "pods": 1},
        ],
    }


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as end:
        main(argv)
    out, err = capsys.readouterr()
    return end.value.code, out, err


def objects(path: Path) -> list[tuple[str, str]]:
    return [(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(path.read_text())]


def test_render_writes_one_file_per_cluster(repo, exp, capsys):
    path = write_run(repo / "runs" / "exp", exp, "lm-diloco.yaml")
    code, out, _ = run_cli(["render", str(path)], capsys)
    assert code == exitcodes.OK, out
    assert out.splitlines()[0].startswith(f"wrote {US}: learner us: 1 pod × 8 H200 GPUs")
    assert "; synchronizer: 1 pod × 4 CPUs" in out.splitlines()[0]
    assert out.splitlines()[1].startswith(f"wrote {EU}: learner eu: 1 pod × 8 H100 GPUs")
    us, eu = objects(repo / US), objects(repo / EU)
    assert {
        ("RayJob", "lm-diloco-us"),
        ("Job", "lm-diloco-sync"),
        ("Service", "lm-diloco-sync"),
    } <= set(us)
    assert ("RayJob", "lm-diloco-eu") in eu and not any(k in ("Job", "Service") for k, _ in eu)
    text = (repo / US).read_text()
    assert text.startswith("# Rendered by runner from runs/exp/lm-diloco.yaml; do not edit")
    assert "# Re-render: runner render runs/exp/lm-diloco.yaml\n" in text
    for doc in yaml.safe_load_all((repo / EU).read_text()):
        assert doc["metadata"]["labels"][labels.EXPERIMENT] == "lm-diloco"
    assert run_cli(["render", str(path)], capsys)[1].startswith(f"unchanged {US}")


def test_check_rerenders_committed_experiments(repo, exp, capsys):
    path = write_run(repo / "runs" / "exp", exp, "lm-diloco.yaml")
    assert run_cli(["render", str(path)], capsys)[0] == exitcodes.OK
    assert path in gitops.run_definitions()
    code, out, _ = run_cli(["render", "--check"], capsys)
    assert code == exitcodes.OK and out == "apps/ matches 1 run definitions\n"
    exp["synchronizer"]["cpus"] = 8  # the definition changed, apps/ not re-rendered
    write_run(repo / "runs" / "exp", exp, "lm-diloco.yaml")
    code, out, err = run_cli(["render", "--check"], capsys)
    assert code == exitcodes.DIFFERS and f"+++ b/{US}" in out and f"b/{EU}" not in out
    assert "synchronizer: 1 pod × 8 CPUs" in out
    path.unlink()  # the source is gone: both files are orphans
    code, out, _ = run_cli(["render", "--check"], capsys)
    assert code == exitcodes.DIFFERS and US in out and EU in out


def test_check_refuses_a_foreign_file_next_to_an_experiment(repo, exp, capsys):
    path = write_run(repo / "runs" / "exp", exp, "lm-diloco.yaml")
    assert run_cli(["render", str(path)], capsys)[0] == exitcodes.OK
    (repo / "apps/mega-euw4/research/extra.yaml").write_text("kind: Secret\n")
    code, out, _ = run_cli(["render", "--check"], capsys)
    assert code == exitcodes.DIFFERS and "extra.yaml: has no `# Rendered by runner` header" in out


def test_render_is_all_or_nothing(repo, exp, capsys):
    """A name taken in one cluster: neither cluster's file is written."""
    (repo / "apps/mega-euw4/research").mkdir(parents=True)
    (repo / EU).write_text("# Rendered by runner from runs/other.yaml; do not edit by hand.\n")
    path = write_run(repo / "runs" / "exp", exp, "lm-diloco.yaml")
    code, _, err = run_cli(["render", str(path)], capsys)
    assert code == exitcodes.USAGE
    assert "already exists in mega-euw4/research" in err and len(err.strip().splitlines()) == 1
    assert not (repo / US).exists()


def test_validate_writes_nothing_and_bad_input_is_one_line(repo, exp, capsys):
    path = write_run(repo / "runs" / "exp", exp, "lm-diloco.yaml")
    code, out, _ = run_cli(["validate", str(path)], capsys)
    assert code == exitcodes.OK and not (repo / US).exists()
    # no env of their own: the learners' settings are driver overrides, no ConfigMap
    assert out.splitlines()[0].startswith(f"ok {path} in ultra-usc1: RayJob, ")
    assert "Job, Service;" in out.splitlines()[0]
    assert out.splitlines()[1].startswith(f"ok {path} in mega-euw4: RayJob; learner eu")
    exp["learners"][1]["pods"] = 0
    write_run(repo / "runs" / "exp", exp, "lm-diloco.yaml")
    code, _, err = run_cli(["validate", str(path)], capsys)
    assert code == exitcodes.USAGE and err.startswith(
        "error: runs/exp/lm-diloco.yaml: learners[1].pods: "
    )
    assert len(err.splitlines()) == 1
    code, _, err = run_cli(["render", str(path), "--pods", "2"], capsys)
    assert code == exitcodes.USAGE and "is an experiment: run flags do not apply" in err


def test_committed_example_renders_to_its_goldens():
    from runner.commands.render import source_files

    files = source_files(ROOT / "runs/examples/diloco-two-regions.yaml", {}, {}, False)
    assert sorted(gitops.relative_to_root(p, ROOT) for p in files) == [EU, US]
    for path, planned in files.items():
        assert planned.text == path.read_text(), "run scripts/regen-goldens and review"


def test_run_local_dry_run_prints_the_local_command(capsys):
    example = "runs/examples/diloco-two-regions.yaml"
    code, _, err = run_cli(["run", "--local", example, "--steps", "40", "--dry-run"], capsys)
    assert code == exitcodes.OK
    words = local_command(load_experiment(ROOT / example))
    lines = err.strip().splitlines()
    assert lines[0] == "$ " + " ".join([sys.executable, *words[1:]])
    assert lines[1].startswith("  synchronizer: --outer-lr 0.7 ") and "--expect us,eu" in lines[1]
    learners = [("us", "ultra-usc1"), ("eu", "mega-euw4")]
    for line, (name, cluster) in zip(lines[2:], learners, strict=True):
        assert line.startswith(f"  learner {name}: ") and f" diloco.learner={name} " in line
        assert " diloco.sync_every=20 " in line and "diloco.address" not in line
        assert "REVE_DILOCO" not in line
        driver = (
            f"{sys.executable} -m driver.train runs/train/tiny-lm.yaml run.name=lm-diloco-{name}"
        )
        assert f" {driver} " in line and f"run.cluster={cluster}" in line
        assert line.endswith(" parallelism.workers=1 train.steps=40")
    assert len(lines) == 4  # nothing more, and nothing written
    code, _, err = run_cli(["run", "--local", example, "--set", "a=b"], capsys)
    assert code == exitcodes.USAGE and "is an experiment: use --steps only" in err


def test_run_local_refuses_a_bad_learner_on_one_line(tmp_path, exp, capsys):
    exp["learners"][1]["pods"] = 0
    path = write_run(tmp_path, exp, "exp.yaml")
    code, _, err = run_cli(["run", "--local", str(path), "--dry-run"], capsys)
    assert code == exitcodes.USAGE and err.count("\n") == 1
    assert err.startswith("error: ") and ": learners[1].pods: " in err, err


@pytest.mark.slow
def test_run_local_trains_two_learners_that_sync(tmp_path):
    """A tiny two-learner experiment through `runner run --local`: each learner is the
    driver (`python -m driver.train`, one worker), the synchronizer a process, on loopback."""
    name = f"diloco-test-{tmp_path.name[-12:]}".lower().replace("_", "-")
    exp = {
        "name": name,
        "namespace": "research",
        "image": IMAGE,
        "train_config": "runs/train/tiny-lm.yaml",
        "train_overrides": ["data.size=1024", "optimizer.warmup_steps=2"],
        "diloco": {"sync_every": 5, "round_timeout_s": 60, "compression": "fp32"},
        "synchronizer": {"cluster": "ultra-usc1"},
        "learners": [
            {"name": "a", "cluster": "ultra-usc1"},
            {"name": "b", "cluster": "ultra-usc1"},
        ],
    }
    path = write_run(tmp_path, exp, "exp.yaml")
    made = [ROOT / "outputs" / "research" / f"{name}{end}" for end in ("", "-a", "-b")]
    made += [ROOT / "outputs" / "checkpoints" / "research" / f"{name}-{ln}" for ln in "ab"]
    runner = [sys.executable, "-c", "from runner.cli import main; main()"]
    try:
        done = subprocess.run(
            [*runner, "run", "--local", str(path), "--steps", "10"],
            cwd=tmp_path, capture_output=True, text=True, timeout=400,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
        lines = done.stdout.splitlines()
        assert "rounds merged: 2" in done.stdout, done.stdout[-4000:]
        for learner in "ab":
            assert f"[{learner}] done: 10 steps on 1 workers" in lines, done.stdout[-4000:]
        assert any(ln.startswith("[sync] ") and "round 2 merged" in ln for ln in lines)
        rounds = [
            json.loads(x) for x in (made[0] / "state" / "rounds.jsonl").read_text().splitlines()
        ]
        assert all(sorted(r["contributors"]) == ["a", "b"] for r in rounds)
        config = yaml.safe_load((made[1] / "config.yaml").read_text())
        assert config["run"]["name"] == f"{name}-a" and config["parallelism"]["workers"] == 1
    finally:
        import shutil

        for folder in made:
            shutil.rmtree(folder, ignore_errors=True)
