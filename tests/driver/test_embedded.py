"""What an embedded (local) run trims from Ray Train's defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from driver.embedded import UNUSED_LOCALLY, keep_callback, lean_trainer


def _callback(name: str, module: str) -> object:
    return type(name, (), {"__module__": module})()


@pytest.mark.parametrize(
    ("name", "module", "kept"),
    [
        ("DatasetsCallback", "ray.train.v2._internal.callbacks.datasets", False),
        ("PlacementGroupCleanerCallback", "ray.train.v2._internal.callbacks.pg", False),
        ("BackendSetupCallback", "ray.train.v2._internal.callbacks.backend_setup", True),
        ("DatasetsCallback", "my_project.callbacks", True),  # a user's class of that name
    ],
)
def test_keep_callback(name, module, kept):
    assert keep_callback(_callback(name, module)) is kept


def test_an_embedded_run_gets_the_lean_trainer(tmp_path):
    from ray.train.torch import TorchTrainer

    from driver.config import compose
    from driver.launch import trainer_for

    config = Path(__file__).resolve().parents[2] / "runs/train/tiny-lm.yaml"
    cfg, _ = compose(str(config), [f"run.output_dir={tmp_path}"])
    local = trainer_for(cfg, 2, False, None, tmp_path, embedded=True)
    cluster = trainer_for(cfg, 2, False, None, tmp_path, embedded=False)
    assert isinstance(local, TorchTrainer) and type(local).__name__ == "LeanTorchTrainer"
    assert type(cluster) is TorchTrainer


def test_lean_trainer_drops_only_the_callbacks_a_local_run_does_not_use():
    from ray.train import ScalingConfig
    from ray.train.torch import TorchTrainer

    kwargs = {"train_loop_per_worker": lambda: None, "scaling_config": ScalingConfig(num_workers=1)}
    full = [type(cb).__name__ for cb in TorchTrainer(**kwargs)._create_default_callbacks()]
    lean = lean_trainer(TorchTrainer)(**kwargs)._create_default_callbacks()
    assert set(UNUSED_LOCALLY) <= set(full)  # a Ray upgrade that renames them fails here
    assert [type(cb).__name__ for cb in lean] == [n for n in full if n not in UNUSED_LOCALLY]
    assert "BackendSetupCallback" in full  # the process group is still set up
