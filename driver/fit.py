"""A run's training once Ray is up and its channel serves (driver.launch starts both):
the trainer fitted with the progress thread draining the channel, then the run's summary,
or RunFailed with the crash bundle's folder."""

from __future__ import annotations

import time
from pathlib import Path


class RunFailed(Exception):
    """Training failed; `bundle` is the crash bundle's folder, `exit_code` the driver's."""

    def __init__(self, message: str, bundle: Path, exit_code: int = 1):
        super().__init__(message)
        self.bundle, self.exit_code = bundle, exit_code


def train(cfg, config_yaml, fmt, stops, channel, result, use_gpu, embedded, started) -> dict:
    """`launch` once Ray is up and the run's channel serves: the workers' training, then
    the summary (or RunFailed)."""
    import ray

    from driver.aux.coordinator import start_services
    from driver.output import crash
    from driver.output.progress import Progress
    from driver.raytrain import trainer_for

    output_dir = Path(cfg.run.output_dir)
    progress = Progress(cfg, channel, output_dir, fmt)
    channel.persist = progress.persist  # rows written before a checkpoint commits
    progress.log(f"ray {'embedded' if embedded else 'cluster'}: {ray.cluster_resources()}")
    services_up = start_services(cfg, result, use_gpu, progress.log)  # before any training
    if cfg.debug.hold_start_s > 0:  # a drill: start-up held, no worker listens yet
        progress.log(f"debug: start-up held {cfg.debug.hold_start_s:g} s (debug.hold_start_s)")
        time.sleep(cfg.debug.hold_start_s)
    progress.log(f"starting {result.world_size} training workers ({'GPU' if use_gpu else 'CPU'})")
    trainer = trainer_for(cfg, result.world_size, use_gpu, channel.address, output_dir,
                          services_up.spec(cfg))  # fmt: skip
    progress.start()
    if stops is not None:  # without checkpoints no worker listens: a signal stops at once
        stops.attach(channel if cfg.checkpoint.active else None, progress.log)
    interrupted = False
    try:
        trainer.fit()
    except KeyboardInterrupt:  # Interrupted, or Ray's own from inside a blocking get
        interrupted = True
    except Exception as err:
        services_up.stop()
        restarts = channel.restarts()
        if restarts:
            progress.log(f"the worker group was restarted {restarts} times")
        progress.close()
        ranks = failed_ranks(err, channel.get_failures())
        bundle = crash.collect(cfg, config_yaml, err, ranks, list(progress.lines),
                               channel.all_hosts())  # fmt: skip
        message, code = headline(err, ranks), 1
        if cfg.ft.enabled:  # below ft.min_replicas: the one-line reason, exit 3
            from driver.ft.stop import STOPPED_EXIT, stop_reason

            if reason := stop_reason(err):
                message, code = reason, STOPPED_EXIT
        raise RunFailed(message, bundle, code) from err
    progress.close()
    aux_summary = services_up.summary()
    services_up.stop()
    return run_summary(cfg, progress, channel, result, started, interrupted, stops, aux_summary)


def run_summary(cfg, progress, channel, result, started, interrupted, stops, aux_summary):
    """The summary of a run that ended (or was stopped) without failing."""
    from driver.output.progress import summarize

    summary = summarize(progress.rows)
    summary.update(
        world_size=result.world_size,
        wall_s=time.monotonic() - started,
        output_dir=str(cfg.run.output_dir),
        metrics=str(progress.path),
        restarts=channel.restarts(),
    )
    final = {} if interrupted else channel.final()
    summary.update({k: v for k, v in final.items() if k.startswith(("ckpt_", "preempt", "ft_"))})
    if cfg.ft.enabled:  # the run's ft figures and the groups Ray Train replaced
        from driver.ft.launch import summary_fields
        from driver.parallel import Topology

        hosts, first = channel.all_hosts(), progress.metrics.first_attempt
        size = Topology.from_config(cfg.parallelism, result.world_size).group_size
        summary.update(summary_fields(progress.rows, hosts, first, size))
    ending = channel.terminations()
    if ending:  # workers' pods heard terminating (driver.trainer.signals)
        summary["pods_terminated"] = terminated(ending, channel.all_hosts())
    if stops is not None and stops.signum and (interrupted or "preempted_at" in summary):
        summary["stopped_by"] = stops.name
    elif ending and "preempted_at" in summary:
        first = summary["pods_terminated"][0]
        summary["stopped_by"] = f"SIGTERM to rank {first['rank']}'s pod {first['pod']}"
    if aux_summary:
        summary["aux"] = aux_summary
        summary.update({k: v for k, v in final.items() if k.startswith(("aux/", "refresh_"))})
    return summary


def terminated(ending: dict[int, float], hosts: dict[int, dict]) -> list[dict]:
    """The ranks whose pods were heard terminating, first heard first: rank, pod, time."""
    rows = [{"rank": rank, "pod": hosts.get(rank, {}).get("pod", "?"), "at": at}
            for rank, at in ending.items()]  # fmt: skip
    return sorted(rows, key=lambda row: (row["at"], row["rank"]))


def headline(err: BaseException, ranks: dict[int, dict]) -> str:
    """The first failure in time (the root cause; other ranks often fail because of it)."""
    if not ranks:
        return f"{type(err).__name__}: {err}".splitlines()[0]
    first = min(ranks, key=lambda rank: (ranks[rank].get("time", float("inf")), rank))
    return ranks[first]["error"].splitlines()[0]


def failed_ranks(err: BaseException, recorded: dict[int, dict]) -> dict[int, dict]:
    """Per-rank failure records: what ranks sent, plus ranks Ray Train saw fail without one."""
    ranks = {int(rank): record for rank, record in recorded.items()}
    for rank, exc in getattr(err, "worker_failures", {}).items():
        if int(rank) not in ranks:
            text = f"{type(exc).__name__}: {exc}"
            ranks[int(rank)] = {"error": text.splitlines()[0], "traceback": text}
    return ranks
