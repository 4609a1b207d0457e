"""Ray Train's synchronization actor: created only when someone calls it
(driver/raytrain/lazy_sync.py), so a run, which calls none of Ray Train's collectives, never
starts its process."""

from __future__ import annotations

import inspect
import json
import pickle
import subprocess
import sys

import pytest

from driver.raytrain.lazy_sync import PREFIX, LazyFactory, LazySyncActor, install
from tests.driver.conftest import ROOT, TINY_LM


def test_the_factory_hands_out_named_lazy_handles_with_ray_trains_options():
    factory = LazyFactory("ns").options(label_selector={"node": "n1"})
    one, two = factory.remote(timeout_s=5.0, warn_interval_s=1.0), factory.remote()
    assert isinstance(one, LazySyncActor) and one.name.startswith(PREFIX)
    assert one.name != two.name and one.namespace == "ns"
    assert one.options == {"label_selector": {"node": "n1"}} and one.kwargs["timeout_s"] == 5.0
    assert one._handle is None  # nothing created yet


def test_a_pickled_handle_leaves_its_actor_handle_behind():
    lazy = LazySyncActor("train-sync-x", "ns", {"a": 1}, {"timeout_s": 2})
    lazy._handle = object()  # not picklable by reference: it must not travel
    copy = pickle.loads(pickle.dumps(lazy))
    assert (copy.name, copy.namespace, copy.options, copy.kwargs) == (
        "train-sync-x", "ns", {"a": 1}, {"timeout_s": 2},
    )  # fmt: skip
    assert copy._handle is None
    # private names never create the actor (copy, pickle and inspect probe them)
    assert getattr(copy, "__wrapped__", None) is None and copy._handle is None


def test_the_patch_holds_only_while_the_controller_runs(ray_local):
    from ray.train.v2._internal.execution.worker_group import state, worker_group

    saved = worker_group.SynchronizationActor, state._shutdown_sync_actor
    restore = install()
    try:
        assert isinstance(worker_group.SynchronizationActor, LazyFactory)
        assert state._shutdown_sync_actor is not saved[1]
    finally:
        restore()
    assert (worker_group.SynchronizationActor, state._shutdown_sync_actor) == saved


def test_ray_train_still_makes_and_kills_the_actor_where_the_patch_replaces_it():
    """A Ray upgrade that creates or kills the actor elsewhere fails here."""
    from ray.train.v2._internal.execution.worker_group import state, worker_group

    start = inspect.getsource(worker_group.WorkerGroup._start_impl)
    assert "sync_actor = SynchronizationActor.options(" in start
    assert "_shutdown_sync_actor(self.sync_actor)" in inspect.getsource(state.WorkerGroupState)
    assert "_shutdown_sync_actor(self.sync_actor)" in inspect.getsource(
        state.WorkerGroupStateBuilder
    )


def named(ray) -> set[str]:
    return {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)}


def test_resetting_a_barrier_never_made_makes_no_actor(ray_local):
    """A torchft replica-group replacement resets the barrier; none was made: no actor."""
    ray = ray_local
    lazy = LazyFactory(ray.get_runtime_context().namespace).remote(timeout_s=30.0)
    assert ray.get(lazy.reset.remote(), timeout=60) is None
    assert lazy.name not in named(ray) and lazy._handle is None
    lazy.kill()  # still nothing to kill


def last_json_line(script: str, timeout_s: float) -> list:
    """Run `script` in a fresh Python; the JSON list on its last line, whose first item is
    the run's exit code (both exit codes checked, with the script's stderr on failure)."""
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                         text=True, timeout=timeout_s)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got[0] == 0, out.stderr[-2000:]
    return got


def test_the_actor_is_made_on_the_first_call_and_shared_by_every_copy(ray_local):
    ray = ray_local
    namespace = ray.get_runtime_context().namespace
    lazy = LazyFactory(namespace).options(num_cpus=0).remote(timeout_s=30.0)
    assert lazy.name not in named(ray)
    copy = pickle.loads(pickle.dumps(lazy))  # what a worker gets
    assert ray.get(lazy.set_required_ranks.remote(None), timeout=60) is True
    assert lazy.name in named(ray)
    assert copy.handle()._actor_id == lazy.handle()._actor_id  # found by name, not made twice
    assert ray.get(copy.reset.remote(), timeout=60) is None  # the real one's, now it exists
    lazy.kill()
    LazySyncActor("train-sync-never", namespace, {}, {}).kill()  # never made: nothing to do


def test_a_local_run_starts_no_process_beyond_its_training_workers(tmp_path):
    """A whole local run, Ray started as the driver starts it (`connect`), with the
    in-process controller: no SynchronizationActor, nor any other actor, ever existed in its
    Ray (the GCS keeps dead actors too), and Ray started two worker processes in all (each
    writes a `python-core-worker-*.log`): the training workers ran in the ones Ray starts
    beside itself (driver.raytrain.controller.inherited_runtime_env; with a variable set after
    Ray started, there are four)."""
    code = (
        "import glob, json, ray, ray._private.state as st\n"
        "from driver.config.compose import compose\n"
        "from driver.launch import connect\n"
        "from driver.train import main\n"
        f"args = [{TINY_LM!r}, 'train.steps=3', 'optimizer.warmup_steps=1', 'data.size=512',"
        f" 'run.output_dir={tmp_path}']\n"
        "assert connect(compose(args[0], args[1:])[0])\n"
        "code = main(args)\n"
        "logs = ray._private.worker.global_worker.node.get_logs_dir_path()\n"
        "started = glob.glob(logs + '/python-core-worker-*.log')\n"
        "actors = sorted(a['ActorClassName'] for a in st.actors().values())\n"
        "print(json.dumps([code, len(started), actors]))\n"
    )
    code, started, actors = last_json_line(code, timeout_s=300)
    assert actors == ["RayTrainWorker"] * 2 and started == 2, (actors, started)


@pytest.mark.slow
def test_a_cluster_run_starts_no_actor_beyond_its_training_workers(tmp_path):
    """A whole run joined to a Ray cluster of 2 nodes (the shape's, driver/embedded/cluster.py),
    as a RayJob's driver joins its cluster: the controller runs in the driver's process
    there too (driver/raytrain/lean.py), so neither its actor, nor the placement-group
    cleaner, the synchronization actor, the DatasetManager or the AutoscalingCoordinator ever
    existed in the cluster (the GCS keeps dead actors too): only the training workers."""
    code = (
        "import json, os, ray, ray._private.state as st\n"
        "from driver.checkpoint.auth import KEY_ENV, load_secret\n"
        "from driver.embedded.cluster import start, stop\n"
        "from driver.train import main\n"
        "os.environ.setdefault(KEY_ENV, load_secret().decode())\n"
        "cluster = start(2, 1, 1.0)\n"
        "os.environ['RAY_ADDRESS'] = cluster.address\n"
        "try:\n"
        f"    code = main([{TINY_LM!r}, 'train.steps=3', 'optimizer.warmup_steps=1',"
        f" 'data.size=512', 'run.output_dir={tmp_path}', 'shape.nodes=2',"
        " 'shape.gpus_per_node=1', 'shape.accelerator=cpu', 'parallelism.workers=2'])\n"
        "    if not ray.is_initialized():\n"
        "        ray.init(address=cluster.address)\n"
        "    actors = sorted(a['ActorClassName'] for a in st.actors().values())\n"
        "finally:\n"
        "    stop(cluster)\n"
        "print(json.dumps([code, actors]))\n"
    )
    code, actors = last_json_line(code, timeout_s=400)
    assert actors == ["RayTrainWorker"] * 2, actors
