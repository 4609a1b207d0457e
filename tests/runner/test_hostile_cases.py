"""What the fuzzing of run files and flags found, one test each, and a share of the fuzzer's
cases (tests/runner/hostile_cases.py; `scripts/fuzz-runs` runs 10,000): experiment files
whose shared or learner `train_overrides`/`env` are of the wrong kind, a NUL in a file name,
symlink loops as the run file or its env file, true/false for a number, a `train_config`
outside the repository or not a regular file, and a key given twice."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings

from catalog.errors import InputError
from catalog.loader import read_yaml
from tests.runner.conftest import write_run
from tests.runner.hostile_cases import cases, check_case
from tests.runner.test_cli import run_cli
from tests.runner.test_experiment_cli import exp  # noqa: F401 (a fixture)
from tests.runner.test_hostile_inputs import one_error

COMMANDS = {
    "validate": ["validate"],
    "render": ["render", "--dry-run"],
    "run": ["run", "--local", "--dry-run"],
    "submit": ["submit", "--dry-run", "-f"],
}


@pytest.mark.parametrize(
    ("where", "key", "value", "expected"),
    [
        ("shared", "train_overrides", 0.5, "x.yaml: train_overrides: must be a list of key=value"),
        ("shared", "train_overrides", None, "train_overrides: must be a list of key=value, not"),
        ("shared", "env", ["A"], "x.yaml: env: must be a mapping of NAME: value, not ['A']"),
        ("shared", "env", "A=1", "x.yaml: env: must be a mapping of NAME: value"),
        ("learner", "train_overrides", True, "learners[1].train_overrides: must be a list"),
        ("learner", "env", None, "x.yaml: learners[1].env: must be a mapping of NAME: value"),
        ("learner", "env", 3, "x.yaml: learners[1].env: must be a mapping"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("command", ["validate", "render", "run"])
def test_experiment_parts_of_the_wrong_kind(repo, capsys, exp, where, key, value, expected,  # noqa: F811
                                            command):  # fmt: skip
    if where == "shared":
        exp[key] = value
    else:
        exp["learners"][1][key] = value
    path = write_run(repo / "runs", exp, "x.yaml")
    assert expected in one_error(*run_cli([*COMMANDS[command], str(path)], capsys))


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_nul_in_the_run_file_name(repo, capsys, command):
    message = one_error(*run_cli([*COMMANDS[command], "runs/a\x00b.yaml"], capsys))
    assert "the name contains a NUL" in message


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_symlink_loop_as_the_run_file_or_its_env_file(repo, base, capsys, command):
    os.symlink(repo / "loop-b", repo / "loop-a")
    os.symlink(repo / "loop-a", repo / "loop-b")
    message = one_error(*run_cli([*COMMANDS[command], str(repo / "loop-a")], capsys))
    assert message.endswith("loop-a: cannot read: Too many levels of symbolic links")
    if command != "run":  # `run --dry-run` reads no env file
        path = write_run(repo / "runs", {**base, "env_file": str(repo / "loop-a")}, "e.yaml")
        message = one_error(*run_cli([*COMMANDS[command], str(path)], capsys))
        assert "loop-a: cannot read: Too many levels of symbolic links" in message


@pytest.mark.parametrize(
    ("key", "value"),
    [("pods", True), ("gpus", False), ("ttl_seconds", True), ("cpus", True), ("shm", False),
     ("run_as_user", True)],
)  # fmt: skip
def test_true_or_false_is_not_a_number(repo, base, capsys, key, value):
    path = write_run(repo / "runs", {**base, key: value})
    message = one_error(*run_cli(["validate", str(path)], capsys))
    assert message.endswith(f"{key}: expected a number, not {str(value).lower()}")


@pytest.mark.parametrize(
    ("block", "key"), [("diloco", "sync_every"), ("diloco", "fragments"), ("synchronizer", "port")]
)
def test_true_is_not_a_number_in_an_experiment(repo, capsys, exp, block, key):  # noqa: F811
    exp[block][key] = True
    path = write_run(repo / "runs", exp, "x.yaml")
    message = one_error(*run_cli(["validate", str(path)], capsys))
    assert message.endswith(f"x.yaml: {block}.{key}: expected a number, not true")


@pytest.mark.parametrize(
    ("train_config", "expected"),
    [
        ("/proc/self/status", "must be relative to the repository root"),
        ("../../../../proc/self/environ.yaml", "is outside the repository"),
        ("runs/train/../../../x.yaml", "is outside the repository"),
        ("runs/train/../../pyproject.toml", "is not a YAML file (.yaml)"),
        ("runs/train/nope.yaml", "'runs/train/nope.yaml' does not exist"),
        ("escape.yaml", "'escape.yaml' is outside the repository"),  # a symlink out
        ("folder.yaml", "'folder.yaml' is not a regular file"),
    ],
)
def test_train_config_is_a_yaml_file_of_the_repository(repo, base, capsys, train_config,
                                                        expected):  # fmt: skip
    os.symlink("/proc/self/status", repo / "escape.yaml")
    (repo / "folder.yaml").mkdir()
    data = {**base, "cmd": None, "train_config": train_config}
    path = write_run(repo / "runs", {k: v for k, v in data.items() if v is not None})
    message = one_error(*run_cli(["validate", str(path)], capsys))
    assert message.startswith("error: runs/run.yaml: train_config: ")
    assert message.endswith(expected)


def test_a_key_given_twice_in_one_list_of_overrides(repo, base, capsys):
    overrides = ["optimizer.lr=1e-3", "train.steps=5", "optimizer.lr=3e-4"]
    data = {**base, "cmd": None, "train_config": "runs/train/tiny-lm.yaml",
            "train_overrides": overrides}  # fmt: skip
    path = write_run(repo / "runs", data)
    message = one_error(*run_cli(["validate", str(path)], capsys))
    assert message.endswith("train_overrides[2]: 'optimizer.lr' is set twice (entries 1 and 3); "
                            "give each key once")  # fmt: skip
    data["train_overrides"] = ["optimizer.lr=1e-3"]
    path = write_run(repo / "runs", data)
    argv = ["validate", str(path), "--set", "train.steps=4", "--set", "train.steps=5"]
    assert "command line: --set: 'train.steps' is set twice" in one_error(*run_cli(argv, capsys))
    # a flag overrides the file: that is no repetition
    assert run_cli(["validate", str(path), "--set", "optimizer.lr=1"], capsys)[0] == 0


def test_a_catalog_file_with_a_key_given_twice(tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text("name: a\nregion: x\nname: b\n")
    with pytest.raises(InputError, match=r"cluster.yaml: line 3: duplicate key 'name' \(lines 1"):
        read_yaml(path, "cluster.yaml")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("cases")


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=cases())
def test_generated_cases(folder, case):
    """Run files, experiments, locations and flags through every command that reads them:
    exit 0, or exit 2 with one short line; no traceback, no hang."""
    check_case(folder, case)
