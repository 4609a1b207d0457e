"""What a run has saved, said by the driver itself: the line a resuming run starts with, and
the summary of a run stopped at once (a second Ctrl-C), when no worker could say it.

    print(resume_line(cfg) or "")              # "resuming research/x from step 80: <path>"
    print(stopped_line(cfg, signal.SIGINT))    # after the run's process was killed

Both read the run's checkpoint storage (the newest committed checkpoint whose commit marker
is signed with this run's key, as the workers resume it: driver.checkpoint) and the last
row of its metrics file. Neither imports torch.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path


def newest_checkpoint(cfg) -> tuple[int, str] | None:
    """(step, path) of the run's newest committed checkpoint the workers would resume."""
    from driver.checkpoint.auth import load_secret, marker_problem
    from driver.checkpoint.layout import newest_committed, run_uri, step_dir
    from driver.checkpoint.storage import Storage

    team, name = cfg.run.team, cfg.run.name
    secret = load_secret()
    storage = Storage(
        run_uri(cfg.checkpoint.root, team, name),
        check=lambda marker, _: marker_problem(marker, secret, team, name),
    )
    step = newest_committed(storage.step_dirs())
    return None if step is None else (step, storage.uri(step_dir(step)))


def resume_line(cfg) -> str | None:
    """What the run resumes from, when it resumes: `checkpoint.resume=auto` and a committed
    checkpoint of this run in a local folder, or an explicit checkpoint; None when it starts
    afresh (or its checkpoints are in an object store, not read before the storage check)."""
    from driver.checkpoint.storage import is_local

    resume = cfg.checkpoint.resume
    if resume is None:
        return None
    if resume != "auto":
        return f"resuming {cfg.run.team}/{cfg.run.name} from {resume}"
    if not is_local(cfg.checkpoint.root):  # listed only after the bounded storage check
        return None  # (driver.checkpoint.reach); the workers say what they resume from
    try:
        found = newest_checkpoint(cfg)
    except Exception:  # noqa: BLE001 (storage that cannot be listed: the workers will say)
        return None
    if found is None:
        return None
    return (f"resuming {cfg.run.team}/{cfg.run.name} from step {found[0]}: {found[1]} "
            "(checkpoint.resume=null starts afresh)")  # fmt: skip


def last_step(path: Path) -> int | None:
    """The step of the last whole row of a metrics.jsonl file (None without one)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, 2)
            handle.seek(max(0, handle.tell() - 65536))
            lines = handle.read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            return int(json.loads(line)["step"])
        except (ValueError, KeyError, TypeError):
            continue
    return None


def stopped_line(cfg, signum: int) -> str:
    """The summary of a run whose process a second signal killed: how far it trained, the
    checkpoint it resumes from, where its outputs are."""
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    output = Path(cfg.run.output_dir)
    metrics = output / cfg.logging.metrics_file
    step = last_step(metrics)
    lines = [f"stopped at once by a second {name}" +
             (f" after step {step}" if step is not None else " before its first step")]  # fmt: skip
    try:
        found = newest_checkpoint(cfg)
    except Exception as err:  # noqa: BLE001 (say so, on one line)
        lines.append(f"  newest committed checkpoint: unknown ({str(err)[:120]})")
    else:
        where = f"{found[1]} (the same command resumes from it)" if found else "none"
        lines.append(f"  newest committed checkpoint: {where}")
    lines.append(f"  outputs: {output} (metrics: {metrics})")
    return "\n".join(lines)
