"""A table of bad run definitions and the exact one-line message each produces."""

from __future__ import annotations

import pytest

from catalog.errors import InputError
from runner.render import render
from runner.spec import build_spec

SRC = "runs/bad.yaml"
CASES = [
    # (changes to the base run, flag overrides, exact message)
    (
        {"name": "Tiny_LM"},
        {},
        "runs/bad.yaml: name: 'Tiny_LM' is not a DNS-1123 label "
        "(lower-case letters, digits and '-', starting with a letter)",
    ),
    ({"name": "a" * 48}, {}, f"runs/bad.yaml: name: '{'a' * 48}' is longer than 47 characters"),
    (
        {"name": "9lives"},
        {},
        "runs/bad.yaml: name: '9lives' is not a DNS-1123 label "
        "(lower-case letters, digits and '-', starting with a letter)",
    ),
    ({}, {"gpus": 4, "accelerator": None}, None),  # accelerator None = not given: stays H200
    (
        {"accelerator": None, "gpus": 4},
        {},
        "runs/bad.yaml: gpus: 4 GPUs need an accelerator (--accelerator)",
    ),
    ({}, {"gpus": 16}, "command line: --gpus: 16 GPUs exceed the 8 of one H200 node"),
    ({"gpus": 0}, {}, "runs/bad.yaml: gpus: 0 GPUs on H200; leave out accelerator for a CPU run"),
    (
        {"cpus": 300},
        {},
        "runs/bad.yaml: cpus: 300 CPUs exceed the 216 allocatable on one H200 node",
    ),
    (
        {},
        {"memory": "3Ti"},
        "command line: --memory: 3Ti exceeds the 2.64Ti allocatable on one H200 node",
    ),
    (
        {"accelerator": None, "cpus": 64},
        {},
        "runs/bad.yaml: cpus: 64 CPUs exceed the 30 allocatable on one CPU node",
    ),
    (
        {"memory": "lots"},
        {},
        "runs/bad.yaml: memory: 'lots' is not a quantity (e.g. 8, 500m, 512Gi)",
    ),
    (
        {"cpus": float("nan")},
        {},
        "runs/bad.yaml: cpus: nan is not a quantity (e.g. 8, 500m, 512Gi)",
    ),
    ({"memory": 1e300}, {}, "runs/bad.yaml: memory: 1e+300 is more memory than any node has"),
    ({"cpus": 10**9}, {}, "runs/bad.yaml: cpus: 1000000000 is more CPUs than any node has"),
    ({"env_file": "a\x00b"}, {}, "runs/bad.yaml: env_file: contains a NUL character"),
    ({"cpus": "2Gi"}, {}, "runs/bad.yaml: cpus: '2Gi' is not a CPU quantity (e.g. 8, 500m)"),
    ({"cpus": "0.0001"}, {}, "runs/bad.yaml: cpus: '0.0001' is below the smallest CPU request, 1m"),
    ({"shm": "1Ti", "gpus": 1}, {}, "runs/bad.yaml: shm: 1Ti exceeds the pod memory 337Gi"),
    (
        {"head_cpus": 64},
        {},
        "runs/bad.yaml: head_cpus: 64 CPUs exceed the 30 allocatable on one CPU node",
    ),
    (
        {},
        {"head_memory": "1Ti"},
        "command line: --head-memory: 1Ti exceeds the 110Gi allocatable on one CPU node",
    ),
    (
        {"type": "raycluster"},
        {},
        "runs/bad.yaml: cmd: a raycluster runs no entry point; submit jobs to it",
    ),
    ({"cmd": None}, {}, "runs/bad.yaml: cmd: a rayjob needs cmd or train_config"),
    (
        {"train_config": "runs/train/tiny-lm.yaml"},
        {},
        "runs/bad.yaml: cmd: give cmd or train_config, not both",
    ),
    (
        {"cmd": None, "train_config": "runs/train/nope.yaml"},
        {},
        "runs/bad.yaml: train_config: 'runs/train/nope.yaml' does not exist",
    ),
    (
        {"train_overrides": ["a=b"]},
        {},
        "runs/bad.yaml: train_overrides: applies to the driver (train_config), not to cmd",
    ),
    (
        {},
        {"cluster": "moon-1"},
        "command line: --cluster: unknown cluster 'moon-1' (known: mega-euw4, ultra-usc1)",
    ),
    (
        {"accelerator": "B200"},
        {},
        "runs/bad.yaml: accelerator: unknown accelerator 'B200' (known: H100, H200)",
    ),
    (
        {},
        {"accelerator": "H100"},
        "command line: --accelerator: cluster ultra-usc1 has no H100 pool (it has: H200)",
    ),
    (
        {"namespace": "ops"},
        {},
        "runs/bad.yaml: namespace: 'ops' is not a team of ultra-usc1 (teams: research, media)",
    ),
    (
        {"image": "trainer:latest"},
        {},
        "runs/bad.yaml: image: 'trainer:latest' is not pinned by "
        "digest (@sha256:<64 hex>); set allow_mutable_tag to accept a tag",
    ),
    (
        {"image": "Trainer@sha256:12"},
        {},
        "runs/bad.yaml: image: 'Trainer@sha256:12' is not an image reference",
    ),
    (
        {"resource_group": "nope"},
        {},
        "runs/bad.yaml: resource_group: no H200 pool of ultra-usc1 "
        "is in resource group 'nope' (groups: pretrain, scratch)",
    ),
    (
        {"resource_group": "scratch"},
        {},
        "runs/bad.yaml: preemptible: only spot pools match; set preemptible: true",
    ),
    (
        {"priority": "urgent"},
        {},
        "runs/bad.yaml: priority: unknown priority class 'urgent' "
        "(known: training-preemptible, training-default, training-high)",
    ),
    (
        {"priority": "training-high", "preemptible": True},
        {},
        "runs/bad.yaml: priority: 'training-high' conflicts with preemptible",
    ),
    (
        {"pods": 200},
        {},
        "runs/bad.yaml: pods: 200 whole-node pods exceed the 128 H200 nodes "
        "ultra-usc1 offers this run",
    ),
    ({"working_dir": "src"}, {}, "runs/bad.yaml: working_dir: 'src' must be absolute or a URI"),
    (
        {"working_dir": "gs://b/src.zip", "type": "job"},
        {},
        "runs/bad.yaml: working_dir: a URI working_dir needs a rayjob",
    ),
    (
        {"cmd": None, "train_config": "runs/train/tiny-lm.yaml", "resume": "step-5"},
        {},
        "runs/bad.yaml: resume: 'step-5' is not a URI (gs://bucket/team/run/step-N)",
    ),
    (
        {"env": {"HF_TOKEN": "hf_abc"}},
        {},
        "runs/bad.yaml: env.HF_TOKEN: looks like a secret; "
        "reference it with {secretKeyRef: {name, key}}",
    ),
    (
        {"env": {"A": {"secretKeyRef": {"name": "s"}}}},
        {},
        "runs/bad.yaml: env.A: a mapping must be {secretKeyRef: {name: S, key: K}}",
    ),
    ({"env": {"1A": "x"}}, {}, "runs/bad.yaml: env.1A: '1A' is not an environment variable name"),
    ({"env": {"A": None}}, {}, "runs/bad.yaml: env.A: needs a plain value or a secretKeyRef"),
]


@pytest.mark.parametrize(("change", "overrides", "message"), CASES)
def test_bad_input_message(base, change, overrides, message):
    spec = build_spec({**base, **change}, SRC, overrides)
    if message is None:
        render(spec)
        return
    with pytest.raises(InputError) as err:
        render(spec)
    assert err.value.line() == message


def test_env_file_errors(tmp_path, base):
    env = tmp_path / "env.yaml"
    env.write_text("DB_PASSWORD: hunter2\n")
    spec = build_spec({**base, "env_file": str(env)}, SRC)
    with pytest.raises(InputError) as err:
        render(spec)
    assert err.value.line() == (
        f"{env}: DB_PASSWORD: looks like a secret; "
        "reference it with {secretKeyRef: {name, key}}"
    )
    missing = build_spec({**base}, SRC, {"env_file": str(tmp_path / "none.yaml")})
    with pytest.raises(InputError, match="none.yaml: file not found"):
        render(missing)
