"""What the driver trims and guards when it starts its own (embedded) Ray for a local run.

An embedded Ray serves one training run on one machine whose CPUs the training workers
need: every Ray process wakes up periodically even when idle, and on a machine the workers
fill, each wake-up takes CPU from training. A Ray cluster (a RayJob) keeps Ray's defaults.

- `LOCAL_ENV`: no preemption watcher, no Prometheus metrics, no usage stats, resource
  reports, task events and the dashboard agent's node stats at a slower pace than a shared
  cluster needs, a log monitor that looks for new log files once a second rather than
  ten times, and local socket connections retried every 0.1 s rather than every second.
  A variable already set wins.
- `lean_trainer(DataParallelTrainer)` (driver/raytrain/lean.py): Ray Train's trainer
  without the controller callbacks and the AutoscalingCoordinator this run does not use.
- Ray Train's controller in the driver's own process rather than in an actor, when this
  process started the Ray it runs on (`started_ray`): no process that starts and imports
  Ray Train while the workers wait for it (driver/raytrain/controller.py); with the backend of
  driver/raytrain/backend.py the driver never imports torch.
- `lean_ray_start()`, `short_raylet_wait()`, `own_sigterm()` (driver/embedded/ray_start.py; the
  first not with `run.local_dashboard`): `ray.init` without the
  autoscaler monitor and the log monitor (the driver asks Ray for no worker output), with
  Ray's API server started beside the raylet rather than before it (without the dashboard
  it serves only usage stats; without it at all, the dashboard agent would ask the GCS
  for its address every second, logging a traceback each time), a wait for the raylet in
  short steps, and the driver's SIGTERM handler kept.
- `quiet_token_notice()`: token authentication stays on (Ray turns it on for a new local
  cluster), without Ray's start-up warning saying so, which asks nothing of the user.
- `supervise(run)` (driver/embedded/supervise.py): the run in a session of its own.
"""

from __future__ import annotations

import logging
import os

LOCAL_ENV = {
    "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
    "RAY_TRAIN_METRICS_ENABLED": "0",
    "RAY_enable_metrics_collection": "0",
    "RAY_event_stats": "0",
    "RAY_raylet_report_resources_period_milliseconds": "1000",
    "RAY_task_events_report_interval_ms": "5000",
    "RAY_WARN_BLOCKING_GET_INSIDE_ASYNC": "0",  # Ray Train's value for its controller
    "RAY_USAGE_STATS_ENABLED": "0",  # nothing to report from a run with no network
    # Ray's log monitor, where it runs (with the dashboard: `lean_ray_start`), lists the logs
    # folder for new files every 1 s instead of on each 0.1 s poll; lines are read as before.
    "RAY_LOG_MONITOR_MANY_FILES_THRESHOLD": "0",
    "LOG_NAME_UPDATE_INTERVAL_S": "1",
    # Ray's dashboard agent: the node's physical stats (a psutil scan of every Ray process,
    # read only by the dashboard) every 15 s rather than 5 s, and its check that the raylet
    # lives every 2 s rather than 0.4 s (`supervise` ends the whole session anyway).
    "REPORTER_UPDATE_INTERVAL_MS": "15000",
    "RAY_DASHBOARD_AGENT_CHECK_PARENT_INTERVAL_S": "2",
    # The raylet connects to its object store, which a thread of its own starts, and
    # sleeps 1 s when the store is not listening yet (on a busy machine, one start in
    # two): retry every 0.1 s, with the same 10 s budget as Ray's default.
    "RAY_raylet_client_connect_timeout_milliseconds": "100",
    "RAY_raylet_client_num_connect_attempts": "100",
}

STARTED: str | None = None
"""The node ID of the embedded Ray this process started (`started_ray`)."""
STARTED_ENV: dict[str, str] = {}
"""This process's environment when it started that Ray: its daemons, and the worker
processes they start, inherited it."""


def started_ray() -> None:
    """Record, just after ray.init, that this process started the Ray it is connected to."""
    import ray

    global STARTED, STARTED_ENV
    STARTED = ray.get_runtime_context().get_node_id()
    STARTED_ENV = dict(os.environ)


def started_here() -> bool:
    """Whether this process started the Ray it is connected to (`started_ray`)."""
    import ray

    return STARTED is not None and STARTED == ray.get_runtime_context().get_node_id()


TOKEN_LOGGER = "ray._private.authentication.authentication_token_setup"
TOKEN_NOTICE = "Token authentication is enabled for this Ray cluster"


class _DropTokenNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(TOKEN_NOTICE)


def quiet_token_notice() -> None:
    """Drop Ray's warning that it turned token authentication on for a new local cluster
    (the one record, from the logger that writes it; every other line of it stays)."""
    logger = logging.getLogger(TOKEN_LOGGER)
    if not any(isinstance(f, _DropTokenNotice) for f in logger.filters):
        logger.addFilter(_DropTokenNotice())
