"""What an embedded `ray.init` is run with (driver/launch.py `connect`): Ray's start-up,
trimmed for one training run on one machine (driver/embedded/lean.py says why).

    with lean_ray_start(), short_raylet_wait(), own_sigterm():
        ray.init(...)

- `lean_ray_start()` (not with `run.local_dashboard`): no autoscaler monitor, no log
  monitor, Ray's API server started beside the raylet rather than before it, and the
  dashboard packages looked for rather than imported.
- `short_raylet_wait()`: the driver waits for its new raylet in short steps
  (`wait_then_get_node`) rather than Ray's whole seconds.
- `own_sigterm()`: the driver's SIGTERM handler stays through `ray.init`.

Each replaces a function of Ray 2.60 (pinned in pyproject.toml) only while `ray.init` runs;
tests/driver/test_embedded.py checks that Ray still has and calls what they replace.
"""

from __future__ import annotations

import contextlib
import time

RAYLET_WAIT_S = 90.0
"""How long the short steps go on; then Ray's own wait (`GlobalStateAccessor::GetNode`)
decides. Ray 2.60's `Node.__init__` gives a new raylet a fixed 30 s, counted from before
its first `get_node` call, so this wait is also the whole start's: under two test workers
and two busy loops a raylet (which registers once its Python agents are up) took longer
than 30 s and the run failed with "The current node timed out during startup"."""
NODE_POLL_S = 0.05


def wait_until(probe, timeout_s: float, step_s: float = NODE_POLL_S,
               clock=time.monotonic, sleep=time.sleep) -> bool:  # fmt: skip
    """Call `probe` every `step_s` until it is true (True) or `timeout_s` has passed (False)."""
    deadline = clock() + timeout_s
    while True:
        if probe():
            return True
        if clock() + step_s > deadline:
            return False
        sleep(step_s)


def node_alive_probe(gcs_address: str, node_id: str):
    """A probe: whether the GCS at `gcs_address` lists raylet `node_id` (hex) as alive. An
    RPC that fails (the GCS busy or starting) counts as not yet; any other error (Ray's
    client API changed) ends the short wait at once: Ray's own wait then decides."""
    from ray._raylet import GcsClient, NodeID
    from ray.core.generated.gcs_pb2 import GcsNodeInfo
    from ray.core.generated.gcs_service_pb2 import GetAllNodeInfoRequest
    from ray.exceptions import RpcError

    client = GcsClient(address=gcs_address)
    selector = [GetAllNodeInfoRequest.NodeSelector(node_id=NodeID.from_hex(node_id).binary())]
    alive = GcsNodeInfo.GcsNodeState.ALIVE

    def probe() -> bool:
        try:
            return bool(
                client.get_all_node_info(timeout=1, node_selectors=selector, state_filter=alive)
            )
        except RpcError:  # asked again NODE_POLL_S later
            return False

    return probe


def wait_then_get_node(get_node):
    """Ray's `services.get_node(gcs_address, node_id)`, called once the GCS lists the
    raylet alive, asked every NODE_POLL_S. Ray's own wait (`GlobalStateAccessor::GetNode`,
    after a 0.1 s grace) asks once and then sleeps a whole second: the raylet registers
    only once its agents are up, 1.5-2 s after it starts on two cores, so the driver went
    on up to a second after its raylet was ready, in one start in two or three. If the GCS
    cannot be asked at all, or after RAYLET_WAIT_S, Ray's own wait decides, as before."""

    def wait_then_get(gcs_address: str, node_id: str):
        with contextlib.suppress(Exception):  # e.g. no GCS client: Ray's own wait
            wait_until(node_alive_probe(gcs_address, node_id), RAYLET_WAIT_S)
        return get_node(gcs_address, node_id)

    return wait_then_get


@contextlib.contextmanager
def short_raylet_wait():
    """While an embedded `ray.init` runs: Ray 2.60's `services.get_node`, which
    `Node.__init__` calls to wait for the new raylet, waits in short steps first
    (`wait_then_get_node`); restored on leaving."""
    from ray._private import services

    get_node = services.get_node
    services.get_node = wait_then_get_node(get_node)
    try:
        yield
    finally:
        services.get_node = get_node


@contextlib.contextmanager
def lean_ray_start():
    """While an embedded `ray.init` without the dashboard runs: no autoscaler monitor (a
    Python process that polls the GCS every second for an autoscaler an embedded Ray does
    not have), no log monitor (a Python process that polls the workers' log files ten
    times a second to send their lines to a driver that asks for none: `log_to_driver=False`;
    the files stay in the session's logs folder), and Ray's API server (which Ray starts
    even without the dashboard; it then serves only usage stats) starts beside the raylet
    instead of before it: `ray.init` waits for it, then for the raylet, which waits for its
    agents. And Ray's check that the dashboard's packages are installed (which decides
    whether its agents run in their minimal mode) looks for them (`dashboard_deps_error`)
    instead of importing them all in the driver (0.3 s of CPU before the raylet starts).
    Ray 2.60's `Node.start_monitor`, `Node.start_log_monitor`, `Node.start_api_server` and
    `get_dashboard_dependency_error` (pinned in pyproject.toml; a test checks they are
    still there); restored on leaving."""
    import threading

    from ray._private import utils
    from ray._private.node import Node

    monitor, log_monitor = Node.start_monitor, Node.start_log_monitor
    api_server, deps_error = Node.start_api_server, utils.get_dashboard_dependency_error
    started: list[threading.Thread] = []

    def start_api_server(self, **kwargs):
        thread = threading.Thread(target=api_server, args=(self,), kwargs=kwargs,
                                  name="ray-api-server", daemon=True)  # fmt: skip
        thread.start()
        started.append(thread)

    Node.start_monitor = Node.start_log_monitor = lambda self: None
    Node.start_api_server = start_api_server
    utils.get_dashboard_dependency_error = dashboard_deps_error
    try:
        yield
    finally:
        Node.start_monitor, Node.start_log_monitor = monitor, log_monitor
        Node.start_api_server = api_server
        utils.get_dashboard_dependency_error = deps_error
        for thread in started:
            thread.join()


@contextlib.contextmanager
def own_sigterm():
    """While an embedded `ray.init` runs: Ray does not install its SIGTERM handler (which
    exits at once, in the middle of whatever the driver is doing); the driver's own
    (driver/channel/stops.py `StopRelay`) stays, and a SIGTERM before the workers
    train stops the run like Ctrl-C. Ray 2.60's `ray._private.utils.set_sigterm_handler`
    (a test checks it is still what `ray.init` calls); restored on leaving."""
    from ray._private import utils

    saved = utils.set_sigterm_handler
    utils.set_sigterm_handler = lambda handler: None
    try:
        yield
    finally:
        utils.set_sigterm_handler = saved


DASHBOARD_DEPS = ("aiohttp", "aiohttp_cors", "grpc", "opencensus", "opentelemetry",
                  "opentelemetry.exporter.prometheus", "opentelemetry.proto",
                  "prometheus_client", "pydantic")  # fmt: skip
"""The packages Ray 2.60's `ray.dashboard.optional_deps` imports."""


def dashboard_deps_error() -> ImportError | None:
    """Ray's `get_dashboard_dependency_error` without importing the packages: an
    ImportError naming the first of DASHBOARD_DEPS that is not installed, or None."""
    import importlib.util

    for name in DASHBOARD_DEPS:
        try:
            found = importlib.util.find_spec(name) is not None
        except ImportError:  # a parent package is missing
            found = False
        if not found:
            return ImportError(f"No module named {name!r}")
    return None
