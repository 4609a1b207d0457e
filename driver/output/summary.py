"""The closing lines of a training run (`python -m driver.train`), from its summary.

`format_summary(summary)` is what the driver prints when a run ends: the steps and
workers, the loss and pace, the checkpoint lines (`checkpoint_lines`: the newest committed
checkpoint, failed saves, worker-group restarts, a preemption), one line per auxiliary
service (`aux_lines`) and where the outputs are. Pure: the summary dict in, text out.
"""

from __future__ import annotations


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
    if summary.get("ckpt_stopped"):
        lines.append(f"  stopped after step {summary.get('steps', 0)}: checkpoints are failing")
    signal_name = summary.get("stopped_by", "SIGTERM")
    if summary.get("preempted_at") is not None:
        reason = summary.get("preempt_reason", "")
        lines.append(f"  stopped by {signal_name} after step {summary['preempted_at']} ({reason})")
        lost = summary.get("preempt_lost_steps")
        if lost:
            lines.append(f"  the stop cost {lost} steps (trained again on resume)")
        elif lost is not None:
            lines.append("  the stop cost no steps: the final checkpoint holds the last")
    elif summary.get("stopped_by"):  # no checkpoints to write: stopped where it was
        lines.append(f"  stopped by {signal_name} (no checkpoint: checkpoints are off)")
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
