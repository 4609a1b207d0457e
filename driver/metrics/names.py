"""The platform's metric names, one list: the writers (metrics.jsonl keys map to them), the
dashboards' SQL (`platform.run_metrics.name`) and the tests use this module.

A metrics row's key maps to its platform name with `metric_name`: `loss` -> `train/loss`,
`step_time` -> `train/step_time_s`, `ckpt_failures` -> `ckpt/failures`, and the auxiliary
services' `aux/<service>/<field>` keys (driver.aux.fleet) as they are. `METRICS` holds each
name's unit (UCUM, as OpenTelemetry uses) and its OpenTelemetry instrument name.
"""

from __future__ import annotations

from dataclasses import dataclass

from driver.aux.fleet import METRICS as AUX_FIELDS

NOT_METRICS = frozenset({"step", "time", "rank", "attempt"})  # columns or labels of a row


@dataclass(frozen=True)
class Metric:
    name: str  # platform name (run_metrics.name)
    unit: str  # UCUM unit
    otel: str  # OpenTelemetry instrument name
    help: str


def _train(key: str, unit: str, otel: str, help_: str) -> Metric:
    return Metric(f"train/{key}", unit, otel, help_)


TRAIN = (
    _train("loss", "1", "train.loss", "training loss of the rank's batch"),
    _train("lr", "1", "train.learning_rate", "learning rate of the step"),
    _train("grad_norm", "1", "train.grad_norm", "gradient norm before clipping"),
    _train("step_time_s", "s", "train.step.duration", "wall time of the optimizer step"),
    _train("data_wait_s", "s", "train.data.wait", "waiting for batches (and their copy)"),
    _train(
        "forward_backward_s",
        "s",
        "train.forward_backward.duration",
        "forward and backward passes, until the loss is read",
    ),  # fmt: skip
    _train(
        "optimizer_s",
        "s",
        "train.optimizer.duration",
        "clipping, optimizer and LR schedule steps, until the norm is read",
    ),  # fmt: skip
    _train("tokens_per_s", "{token}/s", "train.throughput.tokens", "tokens per second"),
    _train("samples_per_s", "{sample}/s", "train.throughput.samples", "samples per second"),
    _train("rss_bytes", "By", "process.memory.usage", "resident memory of the rank"),
    _train(
        "cuda_max_allocated_bytes",
        "By",
        "train.cuda.memory.max_allocated",
        "peak CUDA memory allocated by the rank",
    ),  # fmt: skip
    _train("param_digest", "1", "train.param_digest", "hash of the rank's parameters (drills)"),
)
FT = tuple(  # live fault tolerance (driver.ft.replica.FtReplica.metrics, docs/ft.md)
    _train(key, unit, f"train.ft.{key.removeprefix('ft_')}", help_)
    for key, unit, help_ in (
        ("ft_quorum_size", "{group}", "replica groups in the step's quorum"),
        ("ft_failures_survived", "{group}", "replica groups lost and trained through"),
        ("ft_steps_degraded", "{step}", "steps committed with fewer groups than at start"),
        ("ft_heals", "1", "times this group healed from a live peer"),
        ("ft_restores", "1", "checkpoint reads at a first quorum with no live group ahead"),
        ("ft_failed_commits", "1", "steps whose commit vote failed in this group"),
        ("ft_slots", "1", "micro-batches this group ran in the step"),
        ("ft_quorum_s", "s", "time spent forming quorums, in total"),
        ("ft_reduce_s", "s", "time spent in the cross-group allreduce, in total"),
        ("ft_commit_s", "s", "time spent in the commit vote, in total"),
        ("ft_reduce_copied_bytes", "By", "bytes the step's cross-group reduce allocated"),
    )
)
CKPT = tuple(
    Metric(f"ckpt/{key}", unit, f"ckpt.{key}", help_)
    for key, unit, help_ in (
        ("committed_step", "1", "newest committed checkpoint step"),
        ("failures", "1", "failed checkpoint saves so far"),
        ("blocked_s", "s", "training time blocked by the last save"),
    )
)
AUX_UNITS = {"latency_s": "s", "queue_wait_s": "s", "process_s": "s",
             "requests_per_s": "{request}/s"}  # fmt: skip
AUX = tuple(
    Metric(f"aux/*/{field}", AUX_UNITS.get(field, "1"), f"aux.{field}", f"aux service {field}")
    for field in AUX_FIELDS
)
METRICS = {m.name: m for m in (*TRAIN, *FT, *CKPT, *AUX)}
NAMES = tuple(METRICS)
# What every rank reports; rank 0's rows also carry loss, lr, grad norm, checkpoint and
# auxiliary-service fields (the others' would repeat or not apply).
PER_RANK_KEYS = frozenset({"step_time", "data_wait_s", "forward_backward_s", "optimizer_s",
                           "tokens_per_s", "samples_per_s", "rss_bytes",
                           "cuda_max_allocated_bytes", "param_digest"})  # fmt: skip


def metric_name(key: str) -> str:
    """The platform name of a metrics-row key (see the module docstring)."""
    if key.startswith("aux/"):
        return key
    if key.startswith("ckpt_"):
        return "ckpt/" + key.removeprefix("ckpt_")
    if key == "step_time":
        return "train/step_time_s"
    return "train/" + key


def spec(name: str) -> Metric | None:
    """The Metric of a platform name (`aux/<service>/<field>` by its field), None if unknown."""
    parts = name.split("/")
    if len(parts) == 3 and parts[0] == "aux":
        return METRICS.get(f"aux/*/{parts[2]}")
    return METRICS.get(name)


def known(name: str) -> bool:
    return spec(name) is not None
