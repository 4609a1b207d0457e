"""What an embedded (local) run trims from Ray Train's defaults."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from driver.raytrain.lean import UNUSED, UNUSED_IN_PROCESS, keep_callback, lean_trainer

ROOT = Path(__file__).resolve().parents[2]


def _callback(name: str, module: str) -> object:
    return type(name, (), {"__module__": module})()


@pytest.mark.parametrize(
    ("name", "module", "in_process", "kept"),
    [
        ("DatasetsCallback", "ray.train.v2._internal.callbacks.datasets", True, False),
        ("DatasetsCallback", "ray.train.v2._internal.callbacks.datasets", False, False),
        ("PlacementGroupCleanerCallback", "ray.train.v2._internal.callbacks.pg", True, False),
        ("PlacementGroupCleanerCallback", "ray.train.v2._internal.callbacks.pg", False, True),
        ("BackendSetupCallback", "ray.train.v2._internal.callbacks.backend_setup", True, True),
        ("BackendSetupCallback", "ray.train.v2._internal.callbacks.backend_setup", False, True),
        ("DatasetsCallback", "my_project.callbacks", True, True),  # a user's class of that name
    ],
)
def test_keep_callback(name, module, in_process, kept):
    assert keep_callback(_callback(name, module), in_process) is kept


def test_every_run_gets_the_lean_trainer_and_the_torch_free_backend(tmp_path):
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

    from driver.config.compose import compose
    from driver.raytrain import trainer_for
    from driver.raytrain.backend import LeanTorchConfig

    config = Path(__file__).resolve().parents[2] / "runs/train/tiny-lm.yaml"
    cfg, _ = compose(str(config), [f"run.output_dir={tmp_path}"])
    for use_gpu, backend in ((False, "gloo"), (True, "nccl")):  # embedded or in a cluster
        trainer = trainer_for(cfg, 2, use_gpu, None, tmp_path)
        assert isinstance(trainer, DataParallelTrainer) and type(trainer).__name__ == "LeanTrainer"
        assert isinstance(trainer.backend_config, LeanTorchConfig)
        assert trainer.backend_config.backend == backend
        assert trainer.backend_config.timeout_s == 1800


def test_the_driver_never_imports_torch_outside_torchft(tmp_path):
    """Everything the driver imports to build and start a run's trainer, embedded or in a
    cluster with GPUs (the preloaded modules included), leaves torch out: it would cost the
    driver, and Ray Train's controller, a second of CPU while the run starts
    (driver/raytrain/backend.py)."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    code = (
        "import sys, importlib\n"
        "from driver.config.compose import compose\n"
        "from driver.launch import PRELOAD\nfrom driver.raytrain import trainer_for\n"
        "for name in PRELOAD: importlib.import_module(name)\n"
        f"cfg, _ = compose({str(root / 'runs/train/tiny-lm.yaml')!r}, "
        f"['run.output_dir={tmp_path}'])\n"
        "from pathlib import Path\n"
        f"trainer = trainer_for(cfg, 2, True, None, Path({str(tmp_path)!r}))\n"
        "import driver.raytrain.controller, driver.train, driver.output.progress\n"
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                         timeout=120, check=True)  # fmt: skip
    assert out.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("in_process", [True, False])
def test_lean_trainer_drops_only_the_callbacks_a_run_does_not_use(in_process, monkeypatch):
    from ray.train import ScalingConfig
    from ray.train.torch import TorchTrainer

    from driver.raytrain import lean

    kwargs = {"train_loop_per_worker": lambda: None, "scaling_config": ScalingConfig(num_workers=1)}
    full = [type(cb).__name__ for cb in TorchTrainer(**kwargs)._create_default_callbacks()]
    monkeypatch.setattr(lean.controller, "in_process_ok", lambda: in_process)
    kept = lean_trainer(TorchTrainer)(**kwargs)._create_default_callbacks()
    assert set(UNUSED + UNUSED_IN_PROCESS) <= set(full)  # a Ray upgrade that renames them fails
    dropped = UNUSED + (UNUSED_IN_PROCESS if in_process else ())
    assert [type(cb).__name__ for cb in kept] == [n for n in full if n not in dropped]
    assert "BackendSetupCallback" in full  # the process group is still set up


def test_no_run_starts_an_autoscaling_coordinator():
    from ray.train import ScalingConfig
    from ray.train.v2._internal.execution.scaling_policy import create_scaling_policy
    from ray.train.v2._internal.execution.scaling_policy.elastic import ElasticScalingPolicy

    from driver.raytrain.lean import LeanFixedScalingPolicy, lean_kwargs

    fixed = create_scaling_policy(ScalingConfig(num_workers=2))
    lean = lean_kwargs({"scaling_policy": fixed, "other": 1})
    policy = lean["scaling_policy"]
    assert type(policy) is LeanFixedScalingPolicy and lean["other"] == 1
    assert policy.scaling_config is fixed.scaling_config
    policy.after_controller_start(type("Ctx", (), {"run_id": "r"})())  # no actor, no client
    assert policy._coordinator_client is None
    assert policy.make_decision_for_non_running_worker_group().num_workers == 2
    elastic = ElasticScalingPolicy.__new__(ElasticScalingPolicy)  # it asks the coordinator
    assert lean_kwargs({"scaling_policy": elastic})["scaling_policy"] is elastic


def test_ray_train_still_passes_the_policy_where_the_lean_trainer_takes_it():
    import inspect

    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

    fit = inspect.getsource(DataParallelTrainer.fit)  # a Ray upgrade that moves it fails here
    assert "self._initialize_and_run_controller(" in fit and "scaling_policy=" in fit
    run = inspect.getsource(DataParallelTrainer._initialize_and_run_controller)
    assert 'runtime_env={"env_vars": env_vars}' in run and "TrainController" in run


def test_the_local_worker_group_passes_what_ray_train_passes_but_the_controller():
    """`LocalWorkerGroup` repeats Ray 2.60's `_init_train_context_on_workers` with no
    controller handle (driver/raytrain/controller.py): a Ray upgrade that changes it fails here."""
    import inspect
    import re

    from ray.train.v2._internal.execution.worker_group import WorkerGroup

    from driver.raytrain.controller import LocalWorkerGroup

    def keywords(method) -> set[str]:
        return set(re.findall(r"^\s+(\w+)=", inspect.getsource(method), re.M))

    ray_source = inspect.getsource(WorkerGroup._init_train_context_on_workers)
    assert "controller_actor=ray.get_runtime_context().current_actor" in ray_source
    local = LocalWorkerGroup._init_train_context_on_workers
    assert keywords(local) == keywords(WorkerGroup._init_train_context_on_workers)
    assert "controller_actor=None" in inspect.getsource(local)
    assert "_decorate_worker_log_file_paths" in ray_source
    # the only place Ray Train gives the workers the controller's handle
    from ray.train.v2._internal.execution import context

    uses = re.findall(r"self\.controller_actor\.(\w+)", inspect.getsource(context))
    assert uses == ["get_all_reported_checkpoints"]


def test_lean_ray_start_patches_only_while_ray_starts():
    from ray._private.node import Node

    from driver.embedded.ray_start import lean_ray_start

    monitor, api_server = Node.start_monitor, Node.start_api_server
    log_monitor = Node.start_log_monitor
    calls = []
    Node.start_api_server = lambda self, **kwargs: calls.append(kwargs)  # Ray's, stood in
    try:
        with lean_ray_start():
            assert Node.start_monitor(object()) is None  # no autoscaler monitor
            assert Node.start_log_monitor(object()) is None  # no log monitor
            Node.start_api_server(object(), include_dashboard=False, raise_on_failure=False)
        assert calls == [{"include_dashboard": False, "raise_on_failure": False}]  # joined
        assert Node.start_monitor is monitor and Node.start_log_monitor is log_monitor
    finally:
        Node.start_api_server = api_server


def test_ray_still_has_what_lean_ray_start_replaces():
    import inspect

    from ray._private.node import Node

    # a Ray upgrade that renames them fails here
    assert list(inspect.signature(Node.start_monitor).parameters) == ["self"]
    assert list(inspect.signature(Node.start_log_monitor).parameters) == ["self"]
    assert "self.start_log_monitor()" in inspect.getsource(Node.start_ray_processes)
    assert {"include_dashboard", "raise_on_failure"} <= set(
        inspect.signature(Node.start_api_server).parameters
    )
    head = inspect.getsource(Node.start_head_processes)
    assert "self.start_monitor()" in head and "self.start_api_server(" in head
    # the new node's wait for its raylet, looked up at call time (so the stand-in is used)
    from ray._private import services

    assert "ray._private.services.get_node(" in inspect.getsource(Node.__init__)
    assert list(inspect.signature(services.get_node).parameters) == ["gcs_address", "node_id"]


def test_the_dashboard_check_looks_for_what_ray_would_import(monkeypatch):
    """`dashboard_deps_error` finds the packages Ray's own check imports, without
    importing them: the same list as Ray 2.60's ray.dashboard.optional_deps."""
    import ast
    import importlib.util

    from driver.embedded import ray_start

    source = Path(importlib.util.find_spec("ray.dashboard.optional_deps").origin).read_text()
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module)
    # aiohttp's own submodules come with aiohttp (finding them would import it)
    wanted = {name for name in imported if not name.startswith("aiohttp.")}
    assert wanted == set(ray_start.DASHBOARD_DEPS)
    assert ray_start.dashboard_deps_error() is None  # installed here (ray[default])
    monkeypatch.setattr(ray_start, "DASHBOARD_DEPS", ("pydantic", "no_such_package.sub"))
    assert "no_such_package" in str(ray_start.dashboard_deps_error())


def test_ray_init_keeps_the_drivers_sigterm_handler():
    """`own_sigterm` stops `ray.init` installing Ray's SIGTERM handler (which exits at
    once): Ray 2.60 installs it through `set_sigterm_handler`, which a Ray upgrade that
    changes fails here."""
    import inspect

    from ray._private import utils, worker

    from driver.embedded.ray_start import own_sigterm

    assert "ray._private.utils.set_sigterm_handler(sigterm_handler)" in inspect.getsource(
        worker.init
    )
    saved = utils.set_sigterm_handler
    with own_sigterm():
        assert utils.set_sigterm_handler(lambda *a: None) is None
        assert utils.set_sigterm_handler is not saved
    assert utils.set_sigterm_handler is saved


@pytest.mark.parametrize(("value", "ok"), [(None, True), ("0", True), ("1", False)])
def test_the_controller_stays_an_actor_with_state_tracking(monkeypatch, value, ok):
    from driver.raytrain.controller import in_process_ok

    if value is None:
        monkeypatch.delenv("RAY_TRAIN_ENABLE_STATE_TRACKING", raising=False)
    else:
        monkeypatch.setenv("RAY_TRAIN_ENABLE_STATE_TRACKING", value)
    assert in_process_ok() is ok


class Clock:
    def __init__(self):
        self.now, self.slept = 0.0, []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds


@pytest.mark.parametrize(
    ("answers", "timeout_s", "found", "asked"),
    [
        ([True], 30, True, 1),  # registered already: no sleep at all
        ([False, False, True], 30, True, 3),  # found 0.1 s later, not a second later
        ([False] * 100, 0.22, False, 5),  # never: Ray's own wait decides after the timeout
        ([False, True], 0.0, False, 1),  # no time at all: one question
    ],
    ids=["at once", "in steps", "never", "no time"],
)
def test_the_raylet_wait_asks_in_short_steps(answers, timeout_s, found, asked):
    from driver.embedded.ray_start import NODE_POLL_S, wait_until

    clock, replies = Clock(), iter(answers)
    calls = []

    def probe():
        calls.append(clock.now)
        return next(replies)

    assert wait_until(probe, timeout_s, clock=clock, sleep=clock.sleep) is found
    assert len(calls) == asked and set(clock.slept) <= {NODE_POLL_S}


def test_the_short_raylet_wait_patches_only_while_ray_starts():
    from ray._private import services

    from driver.embedded.ray_start import short_raylet_wait

    get_node = services.get_node
    with short_raylet_wait():
        assert services.get_node is not get_node
    assert services.get_node is get_node


def test_the_raylet_probe_asks_a_real_gcs(tmp_path):
    """`node_alive_probe` against a real GCS, through an embedded `ray.init` run as the
    driver runs it (a fresh process): the probe is asked and finds the new raylet, and the
    same probe finds no raylet of another ID."""
    import json
    import subprocess
    import sys

    script = tmp_path / "probe.py"
    script.write_text(
        "import json, ray\n"
        "from driver.embedded import ray_start\n"
        "asked = []\n"
        "real = ray_start.node_alive_probe\n"
        "def recording(address, node_id):\n"
        "    probe = real(address, node_id)\n"
        "    def ask():\n"
        "        asked.append(probe())\n"
        "        return asked[-1]\n"
        "    return ask\n"
        "ray_start.node_alive_probe = recording\n"
        "with ray_start.lean_ray_start(), ray_start.short_raylet_wait():\n"
        "    ray.init(address='local', num_cpus=1, include_dashboard=False,\n"
        "             logging_level='ERROR')\n"
        "node = ray._private.worker._global_node\n"
        "other = real(node.gcs_address, 'ab' * 28)()\n"
        "print(json.dumps({'asked': asked, 'other': other}))\n"
        "ray.shutdown()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["asked"] and got["asked"][-1] is True and got["other"] is False


def test_the_raylet_wait_falls_back_to_rays_own(monkeypatch):
    """If the GCS cannot be asked at all, Ray's own `get_node` waits, as it did before."""
    from driver.embedded import ray_start

    def no_client(gcs_address, node_id):
        raise RuntimeError("no GCS client")

    monkeypatch.setattr(ray_start, "node_alive_probe", no_client)
    got = ray_start.wait_then_get_node(lambda address, node: (address, node))
    assert got("127.0.0.1:1", "ab" * 28) == ("127.0.0.1:1", "ab" * 28)


STARTED_ENV = {"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "2", "RAY_TRAIN_ENABLE_PRINT_PATCH": "0"}


@pytest.mark.parametrize(
    ("runtime_env", "inherited"),
    [
        ({"env_vars": {}}, True),
        ({"env_vars": {"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "2"}}, True),  # what they have
        ({"env_vars": dict(STARTED_ENV)}, True),
        ({"env_vars": {"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "5"}}, False),  # changed since
        ({"env_vars": {"RAY_TRAIN_COLLECTIVE_TIMEOUT_S": "9"}}, False),  # set after Ray started
        ({"env_vars": {}, "pip": ["x"]}, False),  # anything but variables: Ray's to make
        ({}, True),
    ],
)
def test_training_workers_get_no_runtime_env_that_only_repeats_their_own(runtime_env, inherited):
    """With none, they take the worker processes Ray started beside itself."""
    from driver.raytrain.controller import inherited_runtime_env

    got = inherited_runtime_env(runtime_env, STARTED_ENV)
    assert got == ({} if inherited else runtime_env)


def test_ray_train_still_asks_the_worker_group_for_the_workers_runtime_env():
    import inspect

    from ray.train.v2._internal.execution.worker_group import WorkerGroup

    from driver.raytrain.controller import LocalWorkerGroup

    create = inspect.getsource(WorkerGroup._create_workers)
    assert "runtime_env = self._get_worker_runtime_env(" in create
    assert "runtime_env=runtime_env" in create
    assert "_get_worker_runtime_env" in LocalWorkerGroup.__dict__  # the override is in place
