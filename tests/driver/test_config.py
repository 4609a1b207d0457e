"""Config composition: groups + run YAML + overrides, typed, with one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from catalog.errors import InputError
from driver.config.compose import compose
from driver.config.schema import DiTModelConfig, LMModelConfig
from driver.train import main
from tests.driver.conftest import TINY_DIT, TINY_LM


def test_tiny_lm_composes_groups_and_run_values():
    cfg, text = compose(TINY_LM)
    assert isinstance(cfg.model, LMModelConfig)
    assert cfg.data.kind == "text" and cfg.data.seq_len == 64
    assert cfg.optimizer.name == "adamw" and cfg.optimizer.warmup_steps == 15
    here = Path.cwd()  # relative paths are the working directory's, made absolute
    assert cfg.run.name == "tiny-lm" and cfg.run.output_dir == str(here / "outputs/default/tiny-lm")
    assert cfg.checkpoint.root == str(here / "outputs/checkpoints")
    assert cfg.checkpoint.resume == "auto"
    assert cfg.parallelism.workers is None and cfg.parallelism.replica_group_size == 1
    assert cfg.parallelism.fsdp_size == 1 and cfg.data.loader == "inprocess"
    assert "run:\n  name: tiny-lm" in text


def test_tiny_dit_composes():
    cfg, _ = compose(TINY_DIT)
    assert isinstance(cfg.model, DiTModelConfig) and cfg.data.kind == "shapes"


def test_runner_keys_override():
    """The keys `runner.spec.entrypoint` passes (contracts.md)."""
    cfg, _ = compose(
        TINY_LM,
        [
            "run.name=exp1",
            "run.team=research",
            "run.cluster=ultra-usc1",
            "checkpoint.root=gs://bucket",
            "checkpoint.resume=gs://bucket/research/exp1/step-20",
            "train.steps=7",
        ],
    )
    assert cfg.run.output_dir == str(Path.cwd() / "outputs/research/exp1")
    assert cfg.checkpoint.root == "gs://bucket"
    assert cfg.checkpoint.resume == "gs://bucket/research/exp1/step-20"
    assert cfg.train.steps == 7


def test_group_swap_changes_schema():
    cfg, _ = compose(TINY_LM, ["model=tiny_dit", "data=shapes"])
    assert isinstance(cfg.model, DiTModelConfig) and cfg.model.patch_size == 4


@pytest.mark.parametrize(
    ("override", "field", "message"),
    [
        ("train.nope=1", "train.nope", "unknown key"),
        ("+train.nope=1", "train.nope", "unknown key"),
        ("model.depth=3", "model.depth", "unknown key"),
        ("train.steps=many", "train.steps", "could not be converted to Integer"),
        ("train.steps=0", "train.steps", "must be at least 1"),
        ("optimizer.schedule=linear", "optimizer.schedule", "not one of cosine, constant"),
        ("parallelism.device=tpu", "parallelism.device", "not one of"),
        ("model.n_heads=3", "model.n_heads", "must divide model.d_model"),
        ("model=nope", "model", "no option 'nope' (available: tiny_dit, tiny_lm)"),
        ("aux=big", "aux", "no option 'big' (available: dit_local, encode_eval, none)"),
        ("train.steps", "train.steps", "override 'train.steps' is not key=value"),
        ("run.name=[a", "run.name", "cannot parse override 'run.name=[a'"),
        ("optimizer.betas=3", "optimizer.betas", "not a ListConfig"),
        (
            "data.size=10",
            "data.size",
            "must hold one global batch (16 examples: train.micro_batch_size 16 x 1 workers)",
        ),
        ("model=tiny_dit", "data", "dit model needs shapes"),
        ("checkpoint.async_mode=later", "checkpoint.async_mode", "must be one of"),
        ("parallelism.replica_group_size=3", "parallelism.replica_group_size", "multiple"),
    ],
)
def test_bad_config_is_one_line_naming_the_key(override, field, message):
    with pytest.raises(InputError) as caught:
        extra = ["parallelism.fsdp_size=2"] if "replica" in override else []
        compose(TINY_LM, [*extra, override])
    assert caught.value.field == field
    assert message in caught.value.message
    assert "\n" not in caught.value.line()


def test_unknown_key_in_yaml_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(open(TINY_LM).read().replace("  max_grad_norm: 1.0", "  stepz: 3"))
    with pytest.raises(InputError) as caught:
        compose(bad)
    assert caught.value.field == "train.stepz" and caught.value.source == str(bad)


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        ("", "defaults", "not a driver config"),  # empty
        ("name: x\ntype: rayjob\n", "defaults", "not a driver config"),  # a run definition
        ("run: [\n", None, "invalid YAML at line 2, column 1"),
    ],
)
def test_files_that_are_not_driver_configs(tmp_path, text, field, message):
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(InputError) as caught:
        compose(bad)
    assert caught.value.field == field and message in caught.value.message
    assert "\n" not in caught.value.line()


def test_missing_file():
    with pytest.raises(InputError, match="config file not found"):
        compose("runs/train/nope.yaml")


def test_main_bad_config_exits_2_with_one_line(capsys):
    assert main([TINY_LM, "train.steps=abc"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "train.steps" in err
    assert "Traceback" not in err


def test_main_without_arguments_prints_usage(capsys):
    assert main([]) == 2
    assert "usage:" in capsys.readouterr().err


def test_a_shape_composes_the_cluster_layout():
    shape = ["shape.nodes=2", "shape.gpus_per_node=8", "shape.accelerator=H200",
             "shape.cpus_per_gpu=26"]  # fmt: skip
    cfg, _ = compose(TINY_LM, [*shape, "aux=encode_eval", "checkpoint=periodic"])
    par = cfg.parallelism
    assert par.workers is None and par.fsdp_size == 8 and par.replica_group_size == 8
    assert par.device == "gpu" and par.backend == "nccl" and par.cpus_per_worker == 26
    assert cfg.data.loader == "pipeline"
    assert cfg.aux.services["encoder"].train_workers_per_worker == 16
    assert cfg.checkpoint.interval_steps == 200 and cfg.checkpoint.resume == "auto"
    stand_in, _ = compose(TINY_LM, ["shape.nodes=2", "shape.gpus_per_node=2",
                                    "shape.accelerator=cpu"])  # fmt: skip
    assert stand_in.parallelism.backend == "gloo" and stand_in.parallelism.fsdp_size == 2
    ft, _ = compose(TINY_LM, [*shape, "ft=on"])  # whole nodes per replica group under ft
    assert ft.parallelism.fsdp_size == 8 and ft.parallelism.replica_group_size == 8


@pytest.mark.parametrize(
    ("overrides", "env", "expected"),
    [
        ([], {}, "progress"),
        (["run.cluster=ultra-usc1"], {}, "progress"),  # a local run of a cluster's run file
        ([], {"RAY_ADDRESS": "auto"}, "json"),
        (["run.address=auto"], {}, "json"),
        (["logging.format=json"], {}, "json"),
    ],
)
def test_output_format(monkeypatch, overrides, env, expected):
    from driver.train import output_format

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    cfg, _ = compose(TINY_LM, overrides)
    assert output_format(cfg) == expected


def test_main_output_dir_in_the_way_exits_2_with_one_line(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert main([TINY_LM, f"run.output_dir={blocker}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {TINY_LM}: run.output_dir: cannot write {blocker}")
    assert err.count("\n") == 1


def test_launch_time_input_errors_name_the_config_file(tmp_path, capsys, monkeypatch):
    import driver.launch

    def refuse(*_args, **_kwargs):
        raise InputError(None, "parallelism", "needs 8 GPUs, the cluster has 4")

    monkeypatch.setattr(driver.launch, "launch", refuse)
    assert main([TINY_LM, f"run.output_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {TINY_LM}: parallelism: needs 8 GPUs, the cluster has 4\n"


@pytest.mark.parametrize(
    ("given", "made"),
    [
        ((None, "outputs/checkpoints", "auto"),
         ("/home/u/work/outputs/t/r", "/home/u/work/outputs/checkpoints", "auto")),
        (("../out", "ck", "ck/t/r/step-3"), ("/home/u/out", "/home/u/work/ck",
                                              "/home/u/work/ck/t/r/step-3")),
        (("/o", "gs://b", "gs://b/t/r/step-4"), ("/o", "gs://b", "gs://b/t/r/step-4")),
        (("o", "/abs/ck", None), ("/home/u/work/o", "/abs/ck", None)),
    ],
)  # fmt: skip
def test_local_paths_are_made_absolute_against_the_working_directory(given, made):
    """Ray runs the workers in folders of its own: a relative path must mean the folder the
    user ran from, in the driver and in every worker."""
    from types import SimpleNamespace as Box

    from driver.config.compose import fill_defaults

    output_dir, root, resume = given
    cfg = Box(run=Box(output_dir=output_dir, team="t", name="r"),
              checkpoint=Box(root=root, resume=resume),
              parallelism=Box(replica_group_size=1, fsdp_size=1, cpus_per_worker=1.0),
              shape=Box(nodes=0), ft=Box(enabled=False), data=Box(loader="auto"))  # fmt: skip
    fill_defaults(cfg, cwd=Path("/home/u/work"))
    assert (cfg.run.output_dir, cfg.checkpoint.root, cfg.checkpoint.resume) == made
