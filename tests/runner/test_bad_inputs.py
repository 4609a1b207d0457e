"""A table of bad run definitions and flags, each with the exact one-line message it produces.

Every row goes through the CLI (`runner render runs/bad.yaml FLAGS`): exit code 2, exactly one
line on stderr, nothing on stdout and nothing written to apps/.
"""

from __future__ import annotations

import pytest

from catalog import exitcodes
from tests.runner.conftest import IMAGE, write_run
from tests.runner.test_cli import run_cli

DNS = "is not a DNS-1123 label (lower-case letters, digits and '-', starting with a letter)"
SECRET = "looks like a secret; reference it with {secretKeyRef: {name, key}}"
PINNED = "is not pinned by digest (@sha256:<64 hex>); set allow_mutable_tag to accept a tag"
SECRET_REF = "a mapping must be {secretKeyRef: {name: S, key: K}}"
CASES = [
    # (changes to the base run file (None removes a key), flags, exact message)
    # names: DNS-1123 labels, KubeRay's shorter limits
    ({"name": "Tiny_LM"}, [], f"runs/bad.yaml: name: 'Tiny_LM' {DNS}"),
    ({"name": "9lives"}, [], f"runs/bad.yaml: name: '9lives' {DNS}"),
    ({"name": "a" * 48}, [], f"runs/bad.yaml: name: '{'a' * 48}' is longer than 47 characters"),
    ({}, ["--namespace", "Bad_NS"], f"command line: --namespace: 'Bad_NS' {DNS}"),
    (
        {},
        ["-n", "ops"],
        "command line: --namespace: 'ops' is not a team of ultra-usc1 (teams: research, media)",
    ),
    ({"team": "Team A"}, [], f"runs/bad.yaml: team: 'Team A' {DNS}"),
    # the schema: unknown keys, types, enums, bounds
    ({"colour": "red"}, [], "runs/bad.yaml: colour: unknown key"),
    ({"image": None}, [], "runs/bad.yaml: image: required key is missing"),
    (
        {},
        ["--gpus", "abc"],
        "command line: --gpus: Input should be a valid integer, "
        "unable to parse string as an integer",
    ),
    ({}, ["--pods", "0"], "command line: --pods: Input should be greater than or equal to 1"),
    (
        {},
        ["--type", "pod"],
        "command line: --type: Input should be 'rayjob', 'raycluster' or 'job'",
    ),
    (
        {},
        ["--rack-affinity", "rack"],
        "command line: --rack-affinity: Input should be 'block' or 'subblock'",
    ),
    (
        {},
        ["--ttl-seconds", "-5"],
        "command line: --ttl-seconds: Input should be greater than or equal to 0",
    ),
    ({}, ["--set", "lr"], "command line: --set: 'lr' is not key=value"),
    (
        {},
        ["--run-as-user", "0"],
        "command line: --run-as-user: Input should be greater than or equal to 1",
    ),
    (
        {},
        ["--image", IMAGE, "--docker-image", IMAGE],
        "command line: --docker-image: give --image or --docker-image, not both",
    ),
    # GPUs and accelerators
    (
        {"accelerator": None, "gpus": 4},
        [],
        "runs/bad.yaml: gpus: 4 GPUs need an accelerator (--accelerator)",
    ),
    ({}, ["--gpus", "16"], "command line: --gpus: 16 GPUs exceed the 8 of one H200 node"),
    ({"gpus": 0}, [], "runs/bad.yaml: gpus: 0 GPUs on H200; leave out accelerator for a CPU run"),
    (
        {},
        ["--cluster", "moon-1"],
        "command line: --cluster: unknown cluster 'moon-1' (known: mega-euw4, ultra-usc1)",
    ),
    ({}, ["--cluster", "../moon"], f"command line: --cluster: '../moon' {DNS}"),
    (
        {"accelerator": "B200"},
        [],
        "runs/bad.yaml: accelerator: unknown accelerator 'B200' (known: H100, H200)",
    ),
    (
        {},
        ["--accelerators", "H100"],
        "command line: --accelerators: cluster ultra-usc1 has no H100 pool (it has: H200)",
    ),
    (
        {"resource_group": "nope"},
        [],
        "runs/bad.yaml: resource_group: no H200 pool of ultra-usc1 "
        "is in resource group 'nope' (groups: pretrain, scratch)",
    ),
    (
        {"resource_group": "scratch"},
        [],
        "runs/bad.yaml: preemptible: only spot pools match; set preemptible: true",
    ),
    (
        {"pods": 200},
        [],
        "runs/bad.yaml: pods: 200 whole-node pods exceed the 128 H200 nodes "
        "ultra-usc1 offers this run",
    ),
    # the whole-node rule: a run of several pods takes whole nodes (runner.gpupod)
    (
        {"pods": 2, "gpus": 4},
        [],
        "runs/bad.yaml: gpus: 4 of the 8 GPUs of an H200 node on 2 pods: a multi-pod run "
        "takes whole nodes (gpus: 8), or runs as one pod",
    ),
    (
        {"pods": 2},
        ["--gpus", "1"],
        "command line: --gpus: 1 of the 8 GPUs of an H200 node on 2 pods: a multi-pod run "
        "takes whole nodes (gpus: 8), or runs as one pod",
    ),
    # keep_nodes: a GPU rayjob, a duration from 1m to 24h
    (
        {"keep_nodes": "soon"},
        [],
        "runs/bad.yaml: keep_nodes: 'soon' is not a duration (e.g. 30m, 2h, 1h30m)",
    ),
    ({}, ["--keep-nodes", "25h"], "command line: --keep-nodes: 90000s is outside 1m to 24h"),
    (
        {"keep_nodes": "30"},
        [],
        "runs/bad.yaml: keep_nodes: '30' is not a duration (e.g. 30m, 2h, 1h30m)",
    ),
    (
        {"keep_nodes": "30m", "type": "job"},
        [],
        "runs/bad.yaml: keep_nodes: only a rayjob keeps its nodes, not a job",
    ),
    (
        {"keep_nodes": "30m", "gpus": 4},
        [],
        "runs/bad.yaml: keep_nodes: only whole nodes are kept; this run takes 4 of the 8 GPUs "
        "of an H200 node",
    ),
    (
        {"keep_nodes": "30m", "accelerator": None},
        [],
        "runs/bad.yaml: keep_nodes: a CPU run has no GPU nodes to keep",
    ),
    # requests larger than a node's allocatable CPU or memory
    (
        {"cpus": 300},
        [],
        "runs/bad.yaml: cpus: 300 CPUs exceed the 216 allocatable on one H200 node",
    ),
    (
        {},
        ["--memory", "3Ti"],
        "command line: --memory: 3Ti exceeds the 2.64Ti allocatable on one H200 node",
    ),
    (
        {"accelerator": None, "cpus": 64},
        [],
        "runs/bad.yaml: cpus: 64 CPUs exceed the 30 allocatable on one CPU node",
    ),
    (
        {"head_cpus": 64},
        [],
        "runs/bad.yaml: head_cpus: 64 CPUs exceed the 30 allocatable on one CPU node",
    ),
    (
        {},
        ["--head-memory", "1Ti"],
        "command line: --head-memory: 1Ti exceeds the 110Gi allocatable on one CPU node",
    ),
    ({"shm": "1Ti", "gpus": 1}, [], "runs/bad.yaml: shm: 1Ti exceeds the pod memory 337Gi"),
    # quantities that do not parse
    (
        {"memory": "lots"},
        [],
        "runs/bad.yaml: memory: 'lots' is not a quantity (e.g. 8, 500m, 512Gi)",
    ),
    (
        {},
        ["--memory", "12Qi"],
        "command line: --memory: '12Qi' is not a quantity (e.g. 8, 500m, 512Gi)",
    ),
    ({"cpus": "2Gi"}, [], "runs/bad.yaml: cpus: '2Gi' is not a CPU quantity (e.g. 8, 500m)"),
    (
        {"cpus": float("nan")},
        [],
        "runs/bad.yaml: cpus: nan is not a quantity (e.g. 8, 500m, 512Gi)",
    ),
    ({"memory": 1e300}, [], "runs/bad.yaml: memory: 1e+300 is more memory than any node has"),
    ({"cpus": 10**9}, [], "runs/bad.yaml: cpus: 1000000000 is more CPUs than any node has"),
    (
        {"cpus": "0.0001"},
        [],
        "runs/bad.yaml: cpus: '0.0001' is below the smallest CPU request, 1m",
    ),
    ({"memory": 0}, [], "runs/bad.yaml: memory: 0 must be more than 0"),
    # flag combinations per run type
    (
        {"type": "raycluster", "cmd": None},
        ["--cmd", "python x.py"],
        "command line: --cmd: a raycluster runs no entry point; submit jobs to it",
    ),
    (
        {"type": "raycluster"},
        [],
        "runs/bad.yaml: cmd: a raycluster runs no entry point; submit jobs to it",
    ),
    ({"cmd": None}, [], "runs/bad.yaml: cmd: a rayjob needs cmd or train_config"),
    ({"cmd": None}, ["--cmd", " "], "command line: --cmd: is empty"),
    (
        {},
        ["--train-config", "runs/train/tiny-lm.yaml"],
        "command line: --train-config: give cmd or train_config, not both",
    ),
    (
        {"cmd": None, "train_config": "runs/train/nope.yaml"},
        [],
        "runs/bad.yaml: train_config: 'runs/train/nope.yaml' does not exist",
    ),
    (
        {"train_overrides": ["a=b"]},
        [],
        "runs/bad.yaml: train_overrides: applies to the driver (train_config), not to cmd",
    ),
    ({"working_dir": "src"}, [], "runs/bad.yaml: working_dir: 'src' must be absolute or a URI"),
    (
        {"working_dir": "gs://b/src.zip", "type": "job"},
        [],
        "runs/bad.yaml: working_dir: a URI working_dir needs a rayjob",
    ),
    (
        {"cmd": None, "train_config": "runs/train/tiny-lm.yaml"},
        ["--resume", "step-5"],
        "command line: --resume: 'step-5' is not a URI (gs://bucket/team/run/step-N)",
    ),
    ({"env_file": "a\x00b"}, [], "runs/bad.yaml: env_file: contains a NUL character"),
    # priority
    (
        {"priority": "urgent"},
        [],
        "runs/bad.yaml: priority: unknown priority class 'urgent' "
        "(known: training-preemptible, training-default, training-high)",
    ),
    (
        {"priority": "training-high"},
        ["--preemptible"],
        "runs/bad.yaml: priority: 'training-high' conflicts with preemptible",
    ),
    # the image must be pinned by digest
    (
        {},
        ["--docker-image", "trainer:latest"],
        f"command line: --docker-image: 'trainer:latest' {PINNED}",
    ),
    ({"image": "trainer:v1"}, [], f"runs/bad.yaml: image: 'trainer:v1' {PINNED}"),
    (
        {"image": "trainer@sha256:12"},
        [],
        "runs/bad.yaml: image: 'trainer@sha256:12' is not an image reference",
    ),
    (
        {"image": "Trainer@sha256:12"},
        [],
        "runs/bad.yaml: image: 'Trainer@sha256:12' is not an image reference",
    ),
    # env: secrets are references, never values
    ({"env": {"HF_TOKEN": "hf_abc"}}, [], f"runs/bad.yaml: env.HF_TOKEN: {SECRET}"),
    ({"env": {"DB_PASSWORD": "x"}}, [], f"runs/bad.yaml: env.DB_PASSWORD: {SECRET}"),
    ({"env": {"WANDB_API_KEY": "x"}}, [], f"runs/bad.yaml: env.WANDB_API_KEY: {SECRET}"),
    ({"env": {"A": {"secretKeyRef": {"name": "s"}}}}, [], f"runs/bad.yaml: env.A: {SECRET_REF}"),
    (
        {"env": {"A": {"secretKeyRef": {"name": "S!", "key": "k"}}}},
        [],
        f"runs/bad.yaml: env.A: {SECRET_REF}",
    ),
    ({"env": {"1A": "x"}}, [], "runs/bad.yaml: env.1A: '1A' is not an environment variable name"),
    ({"env": {"A": None}}, [], "runs/bad.yaml: env.A: needs a plain value or a secretKeyRef"),
    (
        {},
        ["--env", "runs/env/none.yaml"],
        "command line: --env: 'runs/env/none.yaml' does not exist",
    ),
    # the final save must fit the grace period (catalog/saving.py)
    (
        {"preemptible": True, "model_params": "2B"},
        [],
        "runs/bad.yaml: model_params: a final save of 24 GB a pod takes ~39 s on H200, "
        "over the 15 s GKE gives a pod on a spot node it reclaims",
    ),
    (
        {"model_params": "70B"},
        [],
        "runs/bad.yaml: model_params: a final save of 840 GB a pod takes ~1312 s on H200, "
        "over the longest grace period, 900 s",
    ),
    (
        {},
        ["--model-params", "7Q"],
        "command line: --model-params: '7Q' is not a parameter count (7e9, 7B, 350M)",
    ),
    ({"model_shards": 3}, [], "runs/bad.yaml: model_shards: 3 is more than the run's pods (1)"),
    (
        {
            "cmd": None,
            "train_config": "runs/train/tiny-lm.yaml",
            "train_overrides": ["checkpoint.preemption_budget_s=60"],
        },
        [],
        "runs/bad.yaml: train_overrides: checkpoint.preemption_budget_s is the runner's (the "
        "pods' grace period): set model_params (and model_shards) instead",
    ),  # fmt: skip
    # the command line itself
    ({}, ["-o", "out.yaml"], "command line: --output: 'out.yaml': only '-' (stdout) is supported"),
    ({}, ["--check"], "command line: --check: takes no RUN files"),
]


@pytest.fixture
def base_run() -> dict:
    """A valid rayjob on ultra-usc1 (whole H200 nodes)."""
    return {
        "name": "t-run",
        "type": "rayjob",
        "cluster": "ultra-usc1",
        "namespace": "research",
        "accelerator": "H200",
        "image": IMAGE,
        "cmd": "python train.py",
    }


@pytest.mark.parametrize(("change", "flags", "message"), CASES)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    repo, base_run, capsys, change, flags, message
):
    data = {k: v for k, v in {**base_run, **change}.items() if v is not None}
    write_run(repo / "runs", data, "bad.yaml")
    code, out, err = run_cli(["render", "runs/bad.yaml", *flags], capsys)
    assert (code, out, err) == (exitcodes.USAGE, "", f"error: {message}\n")
    assert not list((repo / "apps").rglob("*"))


def test_the_base_run_is_valid(repo, base_run, capsys):
    write_run(repo / "runs", base_run, "bad.yaml")
    code, out, _ = run_cli(["render", "runs/bad.yaml", "--dry-run"], capsys)
    assert code == exitcodes.OK and out.startswith("would write")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("DB_PASSWORD: hunter2\n", f"runs/env/x.yaml: DB_PASSWORD: {SECRET}"),
        ("- a\n", "runs/env/x.yaml: expected a mapping of NAME: value"),
        ("A: [1\n", "runs/env/x.yaml: line 2: did not find expected ',' or ']'"),
    ],
)
def test_env_file_errors_name_the_env_file(repo, base_run, capsys, text, message):
    (repo / "runs" / "env" / "x.yaml").write_text(text)
    write_run(repo / "runs", {**base_run, "env_file": "runs/env/x.yaml"}, "bad.yaml")
    code, _, err = run_cli(["render", "runs/bad.yaml"], capsys)
    assert (code, err) == (exitcodes.USAGE, f"error: {message}\n")


def test_a_run_file_that_is_not_a_mapping(repo, capsys):
    (repo / "runs" / "bad.yaml").parent.mkdir(exist_ok=True)
    (repo / "runs" / "bad.yaml").write_text("- a\n")
    code, _, err = run_cli(["render", "runs/bad.yaml"], capsys)
    assert (code, err) == (
        exitcodes.USAGE,
        "error: runs/bad.yaml: expected a mapping of run definition keys\n",
    )


def test_a_run_file_that_is_a_directory(repo, capsys):
    (repo / "runs").mkdir(exist_ok=True)
    code, _, err = run_cli(["render", "runs"], capsys)
    assert (code, err) == (exitcodes.USAGE, "error: runs: not a regular file (a folder)\n")
