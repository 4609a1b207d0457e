"""Run definitions: loading, flag overrides and where each value came from; the entry point."""

from __future__ import annotations

import pytest

from catalog.errors import InputError
from runner.commands._run_flags import load_with_flags
from runner.spec import build_spec, dump_spec, entrypoint, load_run
from runner.spec_schema import COMMAND_LINE, flag_name
from tests.runner.conftest import write_run


def test_load_run_applies_overrides_and_tracks_sources(tmp_path, base):
    path = write_run(tmp_path, base)
    spec = load_run(path, {"pods": 3, "gpus": None})
    assert spec.pods == 3 and spec.gpus is None
    assert spec.where("pods") == (COMMAND_LINE, "--pods")
    assert spec.where("cluster")[1] == "cluster"
    assert spec.overridden() == ["pods"]
    assert spec.run_team == "research"


@pytest.mark.parametrize(
    ("data", "overrides", "message"),
    [
        ({"gpus": "x"}, {}, "gpus: Input should be a valid integer"),
        ({}, {"gpus": -1}, "command line: --gpus: Input should be greater than or equal to 0"),
        ({"colour": "red"}, {}, "colour: unknown key"),
        ({"type": "pod"}, {}, "type: Input should be 'rayjob', 'raycluster' or 'job'"),
        ({"train_overrides": ["lr"]}, {}, "train_overrides: 'lr' is not key=value"),
        ({}, {"rack_affinity": "rack"}, "command line: --rack-affinity: Input should be"),
    ],
)
def test_schema_errors_name_file_or_flag(tmp_path, base, data, overrides, message):
    path = write_run(tmp_path, {**base, **data})
    with pytest.raises(InputError) as err:
        load_run(path, overrides)
    assert message in err.value.line()
    if not overrides:
        assert err.value.line().startswith(str(path))


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(InputError, match="file not found"):
        load_run(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a list\n")
    with pytest.raises(InputError, match="expected a mapping"):
        load_run(bad)
    missing = write_run(tmp_path, {"name": "x"}, "m.yaml")
    with pytest.raises(InputError, match="required key is missing"):
        load_run(missing)


@pytest.mark.parametrize(
    ("extra", "local", "expected"),
    [
        ({"cmd": "python a.py --x 'y z'"}, False, ["python", "a.py", "--x", "y z"]),
        (
            {"cmd": None, "train_config": "runs/train/tiny-lm.yaml"},
            True,
            [
                "python",
                "-m",
                "driver.train",
                "runs/train/tiny-lm.yaml",
                "run.name=t-run",
                "run.team=research",
                "run.cluster=ultra-usc1",
            ],
        ),
        (
            {
                "cmd": None,
                "train_config": "runs/train/tiny-lm.yaml",
                "team": "lm",
                "resume": "gs://b/lm/t-run/step-5",
                "train_overrides": ["optim.lr=1e-3"],
            },
            False,
            [
                "python",
                "-m",
                "driver.train",
                "runs/train/tiny-lm.yaml",
                "run.name=t-run",
                "run.team=lm",
                "run.cluster=ultra-usc1",
                "checkpoint.root=gs://reve-ultra-usc1-checkpoints",
                # a cluster run's rows go to the cluster's ClickHouse, not a chDB store
                "logging.clickhouse_url=http://clickhouse.observability.svc:8123",
                "logging.store=false",
                # metrics and log lines over OTLP to the collector; bundles kept in the bucket
                "logging.otel_endpoint=http://otel-collector.observability.svc:4318",
                "logging.bundle_root=gs://reve-ultra-usc1-bundles",
                "checkpoint.resume=gs://b/lm/t-run/step-5",
                "optim.lr=1e-3",
            ],
        ),
    ],
)
def test_entrypoint(base, extra, local, expected):
    assert entrypoint(build_spec({**base, **extra}, "runs/x.yaml"), local=local) == expected


def test_entrypoint_errors(base):
    with pytest.raises(InputError, match="runs/x.yaml: train_config: a run needs cmd"):
        entrypoint(build_spec({**base, "cmd": None}, "runs/x.yaml"))
    with pytest.raises(InputError, match="cmd: cannot split"):
        entrypoint(build_spec({**base, "cmd": "echo 'unclosed"}, "runs/x.yaml"))


def test_dump_spec_round_trips(base):
    spec = build_spec(base, "runs/x.yaml", {"pods": 2})
    assert build_spec(dump_spec(spec)).model_dump() == spec.model_dump()


def test_overrides_replace_file_values(tmp_path, base):
    data = {
        **base,
        "cmd": None,
        "train_config": "runs/train/tiny-lm.yaml",
        "train_overrides": ["optim.lr=1e-3"],
    }
    spec = load_run(write_run(tmp_path, data), {"train_overrides": ["optim.lr=3e-4"]})
    assert spec.train_overrides == ["optim.lr=3e-4"]
    assert spec.where("train_overrides") == (COMMAND_LINE, "--set")


def test_set_flags_extend_the_files_train_overrides(tmp_path, base):
    data = {
        **base,
        "cmd": None,
        "train_config": "runs/train/tiny-lm.yaml",
        "train_overrides": ["optim.lr=1e-3"],
    }
    spec = load_with_flags(write_run(tmp_path, data), {"train_overrides": ["optim.lr=3e-4"]}, {})
    assert spec.train_overrides == ["optim.lr=1e-3", "optim.lr=3e-4"]
    assert entrypoint(spec, local=True)[-1] == "optim.lr=3e-4"


@pytest.mark.parametrize(
    ("field", "typed", "label"),
    [
        ("image", {"image": "--docker-image"}, "--docker-image"),
        ("image", {}, "--image"),
        ("accelerator", {"accelerator": "--accelerators"}, "--accelerators"),
        ("env_file", {}, "--env-file"),
        ("train_overrides", {}, "--set"),
        ("name", {}, "NAME"),
        ("head_cpus", {}, "--head-cpus"),
    ],
)
def test_errors_name_the_flag_typed(base, field, typed, label):
    spec = build_spec({}, COMMAND_LINE, {**base, field: getattr(build_spec(base), field)}, typed)
    assert spec.where(field) == (COMMAND_LINE, label)
    if not typed:
        assert flag_name(field) == label
