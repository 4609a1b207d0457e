"""What each Ray Train worker runs: `train_worker(args)`.

The worker says hello to the run's channel (driver.channel: its attempt comes back, and
the driver learns its pod and node), labels its log lines, builds its trainer
(driver.trainer.build) and trains. The rank that reports the run's final figures (rank 0;
under torchft the writer of the last step, or the group that took over from it) leaves them
in the channel. A failing rank sends its last metrics rows, then records its traceback, log
tail and flight-recorder snapshot in the channel, and re-raises.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import traceback


def train_worker(args: dict) -> None:
    """Ray Train entry point: `args` holds `cfg` (TrainConfig) and `channel` (the run's
    channel address, driver/channel), and `aux` (the services' spec) and `ft_gate` (the
    torchft start gate) when the run has them."""
    import ray
    import ray.train

    from driver.output.logs import where_am_i, worker_logger
    from driver.output.runlogs import LogSpec, close

    cfg = args["cfg"]
    ctx = ray.train.get_context()
    rank = ctx.get_world_rank()
    channel = args["channel"].connect(rank)
    host, handlers = where_am_i(), []
    try:
        ray_node = ray.get_runtime_context().get_node_id()  # for driver.channel.drain
        attempt = channel.call("hello", rank, host, ray_node, timeout_s=60)  # tags its rows
        tags = {"run": cfg.run.name, "rank": rank, "attempt": attempt, **host}
        logger, tail = worker_logger(cfg.logging.tail_lines, tags)
        handlers = LogSpec.of(cfg).install([logger.name, ""], rank=rank, attempt=attempt, **host)
        share_handlers(logger, "driver.checkpoint")
        with failure_record(channel, rank, tail):
            train(cfg, ctx, channel, logger, attempt, args)
    finally:
        close(handlers)  # the run's log file and OTLP (driver/output/runlogs.py)
        channel.close()


def train(cfg, ctx, channel, logger, attempt: int, args: dict) -> dict:
    """Build the trainer, train, and leave the final figures when this rank reports them.
    No `ray.train.report`: nothing reads Ray Train's result, and a report is a barrier of
    every worker through Ray Train's synchronization actor, which a local run then never
    starts (driver/raytrain/lazy_sync.py); under torchft a replaced group's peers may have
    left it."""
    from driver.trainer.build import build_trainer

    trainer = build_trainer(cfg, ctx, channel, logger, attempt, args)
    final = trainer.run()
    if trainer.reports:
        channel.call("finish", final, timeout_s=30)
        trainer.stepper.reported()
    return final


@contextlib.contextmanager
def failure_record(channel, rank: int, tail):
    """On any exception (FtStopped too): the rank's failure record into the channel (the
    crash bundle's), then the exception goes on."""
    try:
        yield
    except BaseException as err:
        from observability.flight_recorder import snapshot

        record = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "time": time.time(),
            "error": f"{type(err).__name__}: {err}",
            "traceback": traceback.format_exc(),
            "log_lines": list(tail.lines),
            "flight_recorder": snapshot(),
        }
        with contextlib.suppress(Exception):
            channel.call("fail", rank, record, timeout_s=10)
        raise


def share_handlers(logger, name: str) -> None:
    """Send the `name` logger's lines where the worker's go (log tail, stderr)."""
    import logging

    other = logging.getLogger(name)
    other.handlers = list(logger.handlers)
    other.setLevel(logging.INFO)
    other.propagate = False
