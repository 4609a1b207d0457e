"""Pure pieces of the driver: LR schedule, batch sharding, crash bundles, summaries,
cluster shape and failure records."""

from __future__ import annotations

import json

import pytest

from catalog.errors import InputError
from driver.config.compose import check_batch
from driver.fit import failed_ranks, headline
from driver.launch import cluster_shape
from driver.optim import lr_factor
from driver.output.crash import filter_env, write_bundle
from driver.output.progress import summarize


@pytest.mark.parametrize(
    ("step", "warmup", "total", "schedule", "expected"),
    [
        (0, 10, 100, "cosine", 0.1),
        (9, 10, 100, "cosine", 1.0),
        (10, 10, 100, "cosine", 1.0),
        (99, 10, 100, "cosine", 0.1),  # the last step reaches min_lr_ratio
        (10 + 89 / 2, 10, 100, "cosine", 0.55),  # half way: the mean of peak and floor
        (50, 10, 100, "constant", 1.0),
        (0, 0, 10, "cosine", 1.0),
        (500, 10, 100, "cosine", 0.1),  # past the end stays at the floor
    ],
)
def test_lr_factor(step, warmup, total, schedule, expected):
    assert lr_factor(step, warmup, total, schedule, 0.1) == pytest.approx(expected)


def test_filter_env_redacts_secrets():
    env = {"HF_TOKEN": "x", "AWS_SECRET_ACCESS_KEY": "y", "PATH": "/bin", "DB_PASSWORD": "z"}
    assert filter_env(env) == {
        "AWS_SECRET_ACCESS_KEY": "<redacted>",
        "DB_PASSWORD": "<redacted>",
        "HF_TOKEN": "<redacted>",
        "PATH": "/bin",
    }


def test_write_bundle(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_API_KEY", "hunter2")
    try:
        raise RuntimeError("boom")
    except RuntimeError as err:
        error = err
    ranks = {1: {"error": "RuntimeError: boom", "traceback": "Traceback ...boom", "host": "h",
                 "log_lines": ["step 1 loss 3.0"]}}  # fmt: skip
    folder = write_bundle(tmp_path, "run:\n  name: x\n", error, ranks, ["driver line"])
    names = sorted(p.name for p in folder.iterdir())
    assert names == sorted(
        ["config.yaml", "error.txt", "rank-1.txt", "driver.log", "environment.json",
         "versions.json", "git.txt", "summary.json", "ranks.json", "nodes"]
    )  # fmt: skip
    assert "boom" in (folder / "error.txt").read_text()
    assert "step 1 loss 3.0" in (folder / "rank-1.txt").read_text()
    env = json.loads((folder / "environment.json").read_text())
    assert env["MY_API_KEY"] == "<redacted>"
    assert json.loads((folder / "versions.json").read_text())["torch"] != "missing"
    assert json.loads((folder / "summary.json").read_text())["failed_ranks"] == [1]
    assert write_bundle(tmp_path, "", error, {}, []) != folder  # never overwrites


def test_summarize():
    rows = [{"step": i + 1, "loss": 4.0 - i, "step_time": 0.5, "time": 10.0 + i} for i in range(4)]
    summary = summarize(rows)
    assert summary["steps"] == 4 and summary["first_loss"] == 4.0 and summary["final_loss"] == 1.0
    assert summary["steps_per_s"] == pytest.approx(1.0)
    assert summarize([]) == {"steps": 0}


NODES = [
    {"Alive": True, "Resources": {"CPU": 4.0}},  # a CPU-only head
    {"Alive": True, "Resources": {"CPU": 208.0, "GPU": 8.0}},
    {"Alive": True, "Resources": {"CPU": 208.0, "GPU": 8.0}},
    {"Alive": False, "Resources": {"CPU": 208.0, "GPU": 8.0}},
]


@pytest.mark.parametrize(
    ("nodes", "device", "cpus", "expected"),
    [
        (NODES, "auto", 8.0, (2, 8, True)),
        (NODES, "cpu", 8.0, (2, 26, False)),  # the head holds no 8-CPU slot: left out
        ([{"Resources": {"CPU": 2.0}}], "auto", 1.0, (1, 2, False)),
        ([{"Resources": {"CPU": 3.0}}], "auto", 1.5, (1, 2, False)),
    ],
)
def test_cluster_shape(nodes, device, cpus, expected):
    assert cluster_shape(nodes, device, cpus) == expected


def test_cluster_shape_gpu_without_gpus_is_input_error():
    with pytest.raises(InputError, match="no GPUs"):
        cluster_shape([{"Resources": {"CPU": 2.0}}], "gpu", 1.0)


def test_failed_ranks_merges_sink_records_and_ray_failures():
    class Failed(Exception):
        worker_failures = {0: ValueError("bad"), 1: RuntimeError("x")}

    recorded = {1: {"error": "RuntimeError: x", "traceback": "tb"}}
    ranks = failed_ranks(Failed(), recorded)
    assert ranks[1]["traceback"] == "tb"
    assert ranks[0]["error"] == "ValueError: bad"
    assert sorted(ranks) == [0, 1]


def test_headline_is_the_earliest_failure():
    ranks = {
        0: {"error": "DistBackendError: connection reset", "time": 12.0},
        1: {"error": "RuntimeError: the cause\nmore", "time": 11.0},
    }
    assert headline(RuntimeError("x"), ranks) == "RuntimeError: the cause"
    assert headline(RuntimeError("group failed\n..."), {}) == "RuntimeError: group failed"


@pytest.mark.parametrize(
    ("size", "world", "fails"), [(64, 4, False), (63, 4, True), (16, 1, False)]
)
def test_check_batch_against_the_planned_world(size, world, fails):
    from types import SimpleNamespace as NS

    cfg = NS(data=NS(size=size), train=NS(micro_batch_size=16))
    if not fails:
        check_batch(cfg, world)
        return
    with pytest.raises(InputError) as caught:
        check_batch(cfg, world)
    assert caught.value.field == "data.size" and "16 x 4 workers" in caught.value.message
