"""The `aux` config section: shipped options compose, and each bad value is one line
naming `aux.<key>` and the file (exit 2 from the driver)."""

from __future__ import annotations

import pytest

from catalog.errors import InputError
from driver.config.compose import compose
from driver.train import main
from tests.driver.conftest import TINY_DIT, TINY_LM

ENC = "aux.services.encoder"


def test_dit_local_composes_with_the_runs_model_in_the_evaluators_kwargs():
    cfg, text = compose(TINY_DIT, ["aux=dit_local"])
    evaluator = cfg.aux.services["evaluator"]
    assert evaluator.singleton and evaluator.kwargs["model"].kind == "dit"
    assert cfg.aux.condition == "encoder" and cfg.aux.refresh.service == "evaluator"
    assert cfg.aux.services["encoder"].placement == "SPREAD"
    assert "handler: driver.aux.services.encoder:EncoderHandler" in text


@pytest.mark.parametrize(
    ("override", "key", "message"),
    [
        (f"{ENC}.handler=nope", f"{ENC}.handler", "is not module:Class"),
        (f"{ENC}.handler=no_such_pkg.mod:Cls", f"{ENC}.handler", "no module no_such_pkg.mod"),
        (f"{ENC}.placement=EVERYWHERE", f"{ENC}.placement", "is not one of SPREAD"),
        (f"{ENC}.full_policy=drop", f"{ENC}.full_policy", "is not one of wait, fail_fast"),
        (f"{ENC}.on_worker_death=ignore", f"{ENC}.on_worker_death", "not one of retry, error"),
        (f"{ENC}.queue_bound=0", f"{ENC}.queue_bound", "must be at least 1"),
        (f"{ENC}.min_replicas=0", f"{ENC}.min_replicas", "must be at least 1"),
        (f"{ENC}.deadline_s=0", f"{ENC}.deadline_s", "must be a positive number"),
        (f"{ENC}.ready_timeout_s=-1", f"{ENC}.ready_timeout_s", "must be a positive number"),
        (f"{ENC}.gpus_per_worker=-0.5", f"{ENC}.gpus_per_worker", "must be a number >= 0"),
        (f"{ENC}.max_restarts=-2", f"{ENC}.max_restarts", "must be -1"),
        ("aux.condition=decoder", "aux.condition", "no service 'decoder' in aux.services"),
        ("aux.refresh.backend=mpi", "aux.refresh.backend", "is not one of auto, gloo, nccl"),
        ("aux.refresh.every_steps=-1", "aux.refresh.every_steps", "must not be negative"),
        ("aux.fleet_interval_s=0", "aux.fleet_interval_s", "must be a positive number"),
        ("aux.refresh.every_steps=0", "aux.evaluate", "scores refreshed weights"),
    ],
)
def test_bad_aux_values_name_the_key(override, key, message):
    with pytest.raises(InputError) as caught:
        compose(TINY_DIT, ["aux=dit_local", override])
    assert caught.value.field == key and message in caught.value.message
    assert caught.value.source.endswith("tiny-dit.yaml")


def test_a_service_without_handler_is_refused():
    with pytest.raises(InputError) as caught:
        compose(TINY_DIT, ["aux=dit_local", f"{ENC}.handler="])
    assert caught.value.field == f"{ENC}.handler" and "required" in caught.value.message


def test_driver_exits_2_with_one_line(capsys):
    assert main([TINY_DIT, "aux=dit_local", f"{ENC}.full_policy=drop"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{ENC}.full_policy" in err and "tiny-dit.yaml" in err


REMOTE_DATA = TINY_DIT.replace("tiny-dit.yaml", "tiny-dit-remote-data.yaml")


@pytest.mark.parametrize(
    ("overrides", "key", "message"),
    [
        (["data.remote_stage=nope"], "data.remote_stage", "no service 'nope' in aux.services"),
    ],
)
def test_remote_stage_needs_a_service(overrides, key, message):
    from driver.config.aux import check_remote_stage

    cfg, _ = compose(REMOTE_DATA, overrides)
    with pytest.raises(InputError) as caught:
        check_remote_stage(cfg)
    assert caught.value.field == key and message in caught.value.message


def test_remote_data_config_composes():
    from driver.config.aux import check_remote_stage

    cfg, _ = compose(REMOTE_DATA)
    check_remote_stage(cfg)
    assert cfg.data.remote_stage == "flip" and set(cfg.aux.services) == {"flip"}


@pytest.mark.parametrize(
    ("path", "overrides", "key", "message"),
    [
        (TINY_LM, ["aux=dit_local"], "aux.condition", "the lm model takes no embeddings"),
    ],
)  # fmt: skip
def test_checks_across_sections_at_launch(path, overrides, key, message):
    from driver.config.aux import check_run

    cfg, _ = compose(path, overrides)
    with pytest.raises(InputError) as caught:
        check_run(cfg)
    assert caught.value.field == key and message in caught.value.message


def test_fsdp_composes_with_weight_refresh():
    """FSDP + refresh: the writer gathers the full weights parameter by parameter."""
    from driver.config.aux import check_run

    cfg, _ = compose(TINY_DIT, ["parallelism.fsdp_size=2", "parallelism.workers=2"])
    check_run(cfg)
    assert cfg.aux.refresh.every_steps > 0 and cfg.parallelism.fsdp_size == 2
