"""How launch asks the planner for auxiliary services: GPUs on GPU runs, CPU slots on CPU
runs, and the CPUs an embedded Ray starts with for training plus services."""

from __future__ import annotations

import pytest

from driver.aux.coordinator import local_cpus
from driver.capacity import services_of as services
from driver.config.compose import compose
from tests.driver.conftest import TINY_DIT, TINY_LM


@pytest.mark.parametrize(
    ("overrides", "use_gpu", "slots"),
    [
        (["aux=dit_local"], True, {"encoder": 0.0, "evaluator": 0.0}),  # CPU-only services
        (["aux=dit_local"], False, {"encoder": 0.5, "evaluator": 0.5}),
        (["aux=dit_local", "parallelism.cpus_per_worker=2"], False,
         {"encoder": 0.25, "evaluator": 0.25}),
        (["aux=encode_eval"], True, {"encoder": 1.0, "evaluator": 1.0}),
        (["aux=encode_eval"], False, {"encoder": 1.0, "evaluator": 1.0}),  # a GPU: a slot
        (["aux=encode_eval", "parallelism.cpus_per_worker=2"], False,
         {"encoder": 1.0, "evaluator": 1.0}),
        (["aux=none"], False, {}),
    ],
)  # fmt: skip
def test_service_slots_per_worker(overrides, use_gpu, slots):
    cfg, _ = compose(TINY_DIT, overrides)
    assert {s.name: s.gpus_per_worker for s in services(cfg, use_gpu)} == slots


@pytest.mark.parametrize(
    ("path", "overrides", "cpus"),
    [
        (TINY_LM, [], 2),
        (TINY_DIT, [], 4),  # 2 trainers + the encoder's and the evaluator's GPU, a slot each
        (TINY_DIT, ["aux=dit_local"], 3),  # 2 trainers + encoder 0.5 + evaluator 0.5 CPU
        (TINY_DIT, ["parallelism.workers=1"], 3),
        (TINY_DIT, ["aux.services.encoder.train_workers_per_worker=1"], 5),  # 2 encoders
        (TINY_DIT, ["aux=none", "parallelism.workers=3"], 3),
    ],
)
def test_embedded_ray_cpus_cover_training_and_services(path, overrides, cpus):
    cfg, _ = compose(path, overrides)
    assert local_cpus(cfg, cfg.parallelism.workers or 2) == cpus  # as driver.launch sizes it
