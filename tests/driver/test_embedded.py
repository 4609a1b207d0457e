"""What an embedded (local) run trims from Ray Train's defaults."""

from __future__ import annotations

import pytest

from driver.embedded import UNUSED_LOCALLY, keep_callback, lean_trainer


class DatasetsCallback:  # named as Ray Train's, to check the rule by name
    pass


class BackendSetupCallback:
    pass


@pytest.mark.parametrize(
    ("callback", "kept"), [(DatasetsCallback(), False), (BackendSetupCallback(), True)]
)
def test_keep_callback(callback, kept):
    assert keep_callback(callback) is kept


def test_lean_trainer_drops_only_the_callbacks_a_local_run_does_not_use():
    from ray.train import ScalingConfig
    from ray.train.torch import TorchTrainer

    kwargs = {"train_loop_per_worker": lambda: None, "scaling_config": ScalingConfig(num_workers=1)}
    full = [type(cb).__name__ for cb in TorchTrainer(**kwargs)._create_default_callbacks()]
    lean = lean_trainer(TorchTrainer)(**kwargs)._create_default_callbacks()
    assert set(UNUSED_LOCALLY) <= set(full)  # a Ray upgrade that renames them fails here
    assert [type(cb).__name__ for cb in lean] == [n for n in full if n not in UNUSED_LOCALLY]
    assert "BackendSetupCallback" in full  # the process group is still set up
