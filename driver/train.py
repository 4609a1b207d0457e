"""Entry point of the training driver: `python -m driver.train CONFIG.yaml [key=value ...]`.

Composes the config (driver/conf groups + the YAML + overrides), prints it and saves it as
`<run.output_dir>/config.yaml`, then runs training on Ray (embedded locally, `address=auto`
in a cluster) and ends with a summary. Exit codes: 0 done, 1 the run failed (a crash bundle
was written; or an auxiliary service failed its start-up check, one line naming it, before
training), 2 bad config (one line naming the key), 143 stopped by SIGTERM (after a final
checkpoint when it fitted `checkpoint.preemption_budget_s`; run again to resume).
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

from catalog.errors import InputError

USAGE = "usage: python -m driver.train CONFIG.yaml [key=value ...]"
PREEMPTED = 143  # 128 + SIGTERM: the run stopped early on a preemption notice


def output_format(cfg) -> str:
    """`progress` on an embedded Ray, `json` when joining a cluster, unless logging.format
    says. (A local run of a cluster's run definition keeps its run.cluster, so the Ray
    address decides, not the cluster name.)"""
    if cfg.logging.format != "auto":
        return cfg.logging.format
    return "json" if cfg.run.address or os.environ.get("RAY_ADDRESS") else "progress"


def format_summary(summary: dict) -> str:
    """The closing lines of a run."""
    lines = [f"done: {summary.get('steps', 0)} steps on {summary.get('world_size')} workers"]
    if "final_loss" in summary:
        lines.append(
            f"  loss {summary['first_loss']:.4f} -> {summary['final_loss']:.4f}, "
            f"{summary['steps_per_s']:.2f} steps/s, {summary['wall_s']:.0f} s wall"
        )
    lines += checkpoint_lines(summary)
    lines += aux_lines(summary)
    lines.append(f"  outputs: {summary['output_dir']} (metrics: {summary['metrics']})")
    return "\n".join(lines)


def checkpoint_lines(summary: dict) -> list[str]:
    """The summary's checkpoint lines: the newest committed checkpoint, failed saves,
    worker-group restarts and a preemption."""
    lines = []
    if summary.get("restarts"):
        lines.append(f"  worker group restarted {summary['restarts']} times")
    if "ckpt_committed_step" in summary:
        uri = summary.get("ckpt_uri") or "none"
        lines.append(f"  newest committed checkpoint: {uri}")
        if not summary.get("steps") and summary["ckpt_committed_step"] >= 0:
            lines.append(
                f"  resumed at step {summary['ckpt_committed_step']}: nothing left to train "
                "(raise train.steps, or start over with checkpoint.resume=null)"
            )
    if summary.get("ckpt_failures"):
        error = summary.get("ckpt_error", "")
        lines.append(f"  checkpoint saves failed: {summary['ckpt_failures']} (last: {error})")
    if summary.get("preempted_at") is not None:
        reason = summary.get("preempt_reason", "")
        lines.append(f"  stopped by SIGTERM after step {summary['preempted_at']} ({reason})")
    return lines


def aux_lines(summary: dict) -> list[str]:
    """One line per auxiliary service: workers, proxies, requests, errors, restarts, and
    the evaluator's newest score."""
    from driver.aux.fleet import EVAL_LOSS, EVAL_VERSION, metric

    lines = []
    for name, svc in summary.get("aux", {}).items():
        line = (f"  aux {name}: {svc['workers']} workers, {svc['proxies']} proxies, "
                f"{svc.get('served', 0)} requests, {svc.get('errors', 0)} errors")  # fmt: skip
        if svc.get("restarts"):
            line += f", {svc['restarts']} worker restarts"
        score = summary.get(metric(name, EVAL_LOSS))
        if score is not None:
            step = summary.get(metric(name, EVAL_VERSION))
            line += f"; eval loss {score:.4f} (weights of step {step})"
        lines.append(line)
    return lines


def main(argv: list[str] | None = None) -> int:
    """Run the driver; returns the exit code (0, 1, 2 or 143)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr if not args else sys.stdout)
        return 2 if not args else 0
    from driver.config import compose

    try:
        cfg, config_yaml = compose(args[0], args[1:])
        check_resume(cfg, args[0])
        output_dir = prepare_output(cfg, config_yaml, args[0])
    except InputError as err:
        print(f"error: {err.line()}", file=sys.stderr)
        return 2
    fmt = output_format(cfg)
    if fmt == "json":
        print(json.dumps({"run": cfg.run.name, "team": cfg.run.team, "config": config_yaml}))
    else:
        print(config_yaml, end="", flush=True)
    return _run(cfg, config_yaml, output_dir, fmt, args[0])


def prepare_output(cfg, config_yaml: str, source: str) -> Path:
    """Create `run.output_dir` and save the composed config there (InputError when the
    folder cannot be made or written: a file in the way, no permission, a full disk)."""
    output_dir = Path(cfg.run.output_dir)
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        (output_dir / "config.yaml").write_text(config_yaml)
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise InputError(source, "run.output_dir", f"cannot write {output_dir}: {reason}") from None
    return output_dir


def check_resume(cfg, source: str) -> None:
    """An explicit `checkpoint.resume` URI must be a committed checkpoint (InputError)."""
    if cfg.checkpoint.resume in (None, "auto"):
        return
    from driver.checkpoint import CheckpointError
    from driver.checkpoint.loading import check_resume_uri

    try:
        check_resume_uri(cfg.checkpoint.resume)
    except CheckpointError as err:
        raise InputError(source, "checkpoint.resume", str(err)) from None


def _run(cfg, config_yaml: str, output_dir: Path, fmt: str, source: str) -> int:
    from driver import crash
    from driver.aux.coordinator import AuxStartError
    from driver.launch import RunFailed, launch

    try:
        summary = launch(cfg, config_yaml, fmt)
    except InputError as err:  # found at launch (capacity, cluster shape): name the config
        err.source = err.source or source
        print(f"error: {err.line()}", file=sys.stderr)
        return 2
    except RunFailed as err:
        print(f"error: run failed: {err}\ncrash bundle: {err.bundle}", file=sys.stderr)
        return 1
    except AuxStartError as err:  # a service failed its start-up check: nothing trained
        print(f"error: {err}", file=sys.stderr)
        return 1
    except Exception as err:  # the driver itself failed: still leave a bundle behind
        bundle = crash.write_bundle(output_dir, config_yaml, err, {}, [traceback.format_exc()])
        print(f"error: driver failed: {type(err).__name__}: {err}", file=sys.stderr)
        print(f"crash bundle: {bundle}", file=sys.stderr)
        return 1
    (output_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    print(format_summary(summary), flush=True)
    return PREEMPTED if summary.get("preempted_at") is not None else 0


if __name__ == "__main__":
    sys.exit(main())
