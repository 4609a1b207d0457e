"""Effective throughput through the platform's own path (`python -m driver.train`, embedded
Ray, Ray Train), for scripts/bench/ft_bench.py --platform:

  ft-on     `ft=on` (constant global batch): Ray Train's TorchftConfig replaces only the
            killed worker's replica group, which heals from a live group
  restart   no ft, checkpoints every --interval steps: Ray Train restarts the whole worker
            group (FailureConfig, driver/checkpoint/restarts.py) from the newest checkpoint

Both train the tiny LM (runs/train/tiny-lm.yaml) on CPU/gloo with the same workers, steps
and failures: when metrics.jsonl first shows a step at or past each kill step (counting
only rows written since the previous kill), this script SIGKILLs one Ray Train worker
process of that run (a descendant of the driver whose command line names RayTrainWorker),
a real worker death that Ray Train handles as in production.

Effective throughput = committed samples / wall seconds, two ways:
  from launch       from the driver's start to the last committed step
  from first step   from the first committed step to the last (the figure: Ray's start,
                    the worker group's start and the first step's set-up are the same
                    for both runs and are paid once per job; over a real run they are
                    amortised to nothing, while over a short benchmark they dilute the
                    ratio toward 1)

With replica groups of several workers (`size` > 1) it also runs the failure-free pair
(steps/s ft ÷ plain, bytes the cross-group reduce copied) and, twice (the run's own
`ft.heartbeat_timeout_ms` and TERM_HEARTBEAT_MS), a SIGTERM to the last rank before step
TERM_STEP + 1 as a pod's termination: SIGTERM -> the survivors' first quorum without its
group (`out_of_quorum`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "runs/train/tiny-lm.yaml"
TERM_HEARTBEAT_MS = 300  # the SIGTERM figure is also taken with this heartbeat timeout


def committed(rows: list[dict]) -> list[dict]:
    """The newest row of each step (a restarted group re-runs steps), ordered by step."""
    best: dict[int, dict] = {}
    for row in rows:
        best[row["step"]] = row
    return [best[s] for s in sorted(best)]


def effective_throughput(rows: list[dict], launched: float, batch: int) -> tuple[float, float]:
    """(samples/s from launch, samples/s from the first committed step) of one run's
    metrics rows, each step committing `batch` samples; both up to the last committed step.
    Steps commit in order, so the last step's number counts them (even if a row were
    missing). The first step is the first ever committed (a restarted group commits it
    again)."""
    done = committed(rows)
    if not done:
        raise ValueError("no committed step")
    last, first = done[-1], min(rows, key=lambda r: r["time"])
    from_launch = last["step"] * batch / (last["time"] - launched)
    span = last["time"] - first["time"]
    from_first = (last["step"] - first["step"]) * batch / span if span > 0 else float("nan")
    return from_launch, from_first


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def train_workers(pid: int) -> list[int]:
    """Ray Train worker processes of the driver `pid`, oldest pid first."""
    found = []
    for child in descendants(pid):
        try:
            cmd = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"RayTrainWorker" in cmd:
            found.append(child)
    return sorted(found)


def read_rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    return [json.loads(x) for x in lines if x.strip().endswith("}")]


def run(
    folder: Path,
    name: str,
    workers: int,
    steps: int,
    kills: list[int],
    extra: list[str],
    timeout_s: float = 300,
):
    """One `python -m driver.train` run with a worker SIGKILLed at each of `kills`:
    (metrics rows, launch time, kill times, exit code). A run past `timeout_s` is killed
    with its whole session (Ray's daemons included); its exit code is then negative."""
    out = folder / name
    args = [
        str(CONFIG),
        f"train.steps={steps}",
        f"parallelism.workers={workers}",
        "parallelism.device=cpu",
        "logging.format=json",
        f"run.output_dir={out}",
        f"run.name=ft-platform-{name}",
        *extra,
    ]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.5")
    metrics, killed, seen = out / "metrics.jsonl", [], 0
    log = open(folder / f"{name}.log", "w")  # noqa: SIM115
    launched = time.time()
    proc = subprocess.Popen(
        [sys.executable, "-m", "driver.train", *args],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    try:
        while proc.poll() is None and time.time() - launched < timeout_s:
            time.sleep(0.05)
            if len(killed) == len(kills):
                continue
            rows = read_rows(metrics)
            if any(r["step"] >= kills[len(killed)] for r in rows[seen:]):
                victims = train_workers(proc.pid)
                if victims:
                    os.kill(victims[len(killed) % len(victims)], signal.SIGKILL)
                    killed.append(time.time())
                    seen = len(rows)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        log.close()
    return read_rows(metrics), launched, killed, proc.returncode


def layout(workers: int, size: int) -> list[str]:
    """Replica groups of `size` workers sharding the model (FSDP `size` inside a group;
    size 1: plain data parallelism), on an embedded Ray with a CPU per worker."""
    if size == 1:
        return []
    return [f"parallelism.replica_group_size={size}", f"parallelism.fsdp_size={size}",
            f"run.local_cpus={workers}"]  # fmt: skip


def measure(
    folder: Path, workers: int, steps: int, kills: list[int], interval: int, size: int = 1
) -> dict:
    """Both runs (and with `size` > 1 the failure-free pair: ft-clean, plain); the printed
    lines' numbers."""
    batch = workers * 16  # tiny-lm.yaml: micro_batch_size 16, grad_accum_steps 1
    ft_on = ["ft=on", "ft.min_replicas=1", "checkpoint.interval_steps=0", *layout(workers, size)]
    ckpt = [
        f"checkpoint.interval_steps={interval}",
        f"checkpoint.root={folder / 'ckpt'}",
        f"checkpoint.max_failures={len(kills) + 1}",
        *layout(workers, size),
    ]
    result: dict = {"size": size}
    if size > 1:
        result["clean"] = clean_pair(folder, workers, steps, ft_on, layout(workers, size))
        result["term"] = [term_run(folder, workers, size, hb) for hb in (None, TERM_HEARTBEAT_MS)]
    for name, extra in (("ft-on", ft_on), ("restart", ckpt)):
        rows, launched, killed, code = run(folder, name, workers, steps, kills, extra)
        done = committed(rows)
        if code != 0 or not done or done[-1]["step"] != steps:
            tail = (folder / f"{name}.log").read_text()[-2000:]
            raise SystemExit(f"platform {name} run failed (exit {code}): {tail}")
        launch, first = effective_throughput(rows, launched, batch)
        wall = done[-1]["time"] - launched
        result[name] = {"launch": launch, "first": first, "wall": wall, "kills": len(killed)}
        result[name]["gaps"] = steps - len(done)
        if len(killed) != len(kills):
            raise SystemExit(f"platform {name} run: {len(killed)} of {len(kills)} kills struck")
        summary = json.loads((folder / name / "summary.json").read_text())
        result[name]["restarts"] = summary.get("restarts", 0)
        result[name]["replaced"] = summary.get("ft_groups_replaced", 0)
        result[name]["degraded"] = done[-1].get("ft_steps_degraded", 0)
        result[name]["survived"] = done[-1].get("ft_failures_survived", 0)
        result[name]["span"] = done[-1]["time"] - min(r["time"] for r in rows)
    return result


def clean_pair(folder: Path, workers: int, steps: int, ft_on: list[str], plain: list[str]):
    """Failure-free ft-on and plain runs of the same layout: steps/s of each (between the
    first and last commit), and the bytes the cross-group reduce copied per step."""
    out = {}
    for name, extra in (("ft-clean", ft_on), ("plain", [*plain, "checkpoint.enabled=false"])):
        rows, _, _, code = run(folder, name, workers, steps, [], extra)
        done = committed(rows)
        if code != 0 or not done or done[-1]["step"] != steps:
            tail = (folder / f"{name}.log").read_text()[-2000:]
            raise SystemExit(f"platform {name} run failed (exit {code}): {tail}")
        out[name] = (len(done) - 1) / (done[-1]["time"] - done[0]["time"])
        out[f"{name}-copied"] = max(r.get("ft_reduce_copied_bytes", 0) for r in done)
    return out


def out_of_quorum(rows: list[dict], signalled: float) -> dict:
    """SIGTERM -> the survivors' first quorum without the leaving group, from a run's rows
    of record (`ft_quorum_size` drops at that step; `ft_quorum_s` is the run's running total
    of quorum waits; a row's `time - step_time` is when its quorum formed): seconds in all,
    of which the step in flight (to the survivors' commit of the group's last step) and the
    survivors' quorum wait; and the first step without the group."""
    done = committed(rows)
    for before, alone in zip(done, done[1:], strict=False):
        if alone["ft_quorum_size"] < before["ft_quorum_size"]:
            formed = alone["time"] - alone["step_time"]
            return {"total": formed - signalled, "in_flight": before["time"] - signalled,
                    "quorum": alone["ft_quorum_s"] - before["ft_quorum_s"],
                    "step": alone["step"]}  # fmt: skip
    raise ValueError("no quorum without the group")


TERM_STEP = 4  # SIGTERM before the forward pass of step TERM_STEP + 1


def term_run(folder: Path, workers: int, size: int, heartbeat_ms: int | None) -> dict:
    """One `ft=on` run of groups of `size` in which the last rank hears a SIGTERM before a
    step (`debug.term_at_step`, as a pod's termination): its group leaves after that step;
    `out_of_quorum` of it, with the heartbeat timeout it ran with."""
    name = f"term-{heartbeat_ms or 'default'}"
    extra = ["ft=on", "ft.min_replicas=1", "checkpoint.interval_steps=0",
             f"checkpoint.root={folder / 'ckpt-term'}", f"debug.term_at_step={TERM_STEP}",
             f"debug.kill_rank={workers - 1}", *layout(workers, size)]  # fmt: skip
    if heartbeat_ms is not None:
        extra.append(f"ft.heartbeat_timeout_ms={heartbeat_ms}")
    rows, _, _, code = run(folder, name, workers, 30, [], extra)
    if code != 0:
        tail = (folder / f"{name}.log").read_text()[-2000:]
        raise SystemExit(f"platform {name} run failed (exit {code}): {tail}")
    mark = folder / name / ".faults" / f"term-{TERM_STEP}-{workers - 1}"
    config = yaml.safe_load((folder / name / "config.yaml").read_text())
    timeout = int(config["ft"]["heartbeat_timeout_ms"])  # what the run composed
    return {**out_of_quorum(rows, float(mark.read_text())), "heartbeat_ms": timeout}


def report_term(terms: list[dict], size: int) -> None:
    for t in terms:
        print(
            f"  SIGTERM -> group out of the quorum (groups of {size}, ft.heartbeat_timeout_ms="
            f"{t['heartbeat_ms']})  {t['total']:.2f} s  [<= 0.5 s]  (the step in flight "
            f"{t['in_flight']:.2f} s, the survivors' quorum wait {t['quorum']:.2f} s)"
        )


def report_clean(clean: dict, size: int) -> None:
    print(
        f"  steps/s ft-clean / plain (groups of {size}, no failure)  "
        f"{clean['ft-clean'] / clean['plain']:6.2f}  [>= 0.9]  "
        f"({clean['ft-clean']:.2f} vs {clean['plain']:.2f} steps/s)"
    )
    grad = gradient_bytes()
    print(
        f"  bytes copied per step by the cross-group reduce / gradient bytes  "
        f"{clean['ft-clean-copied'] / grad:6.3f}  [<= 0.05]  "
        f"({clean['ft-clean-copied']} of {grad} bytes)"
    )


def gradient_bytes() -> int:
    """The tiny LM's gradient bytes (float32, every parameter)."""
    sys.path.insert(0, str(ROOT))
    from driver.config.compose import compose
    from driver.workloads import build

    cfg, _ = compose(str(CONFIG), [])
    return sum(p.numel() * 4 for p in build(cfg.model, cfg.data).model.parameters())


def report(result: dict, workers: int, steps: int, kills: list[int], interval: int) -> None:
    ft, rs = result["ft-on"], result["restart"]
    print(
        f"ft platform bench: python -m driver.train tiny LM, {workers} workers (replica "
        f"groups), {steps} steps, a worker SIGKILLed at steps {','.join(map(str, kills))} "
        f"(ft-on {ft['kills']}, restart {rs['kills']}), restart checkpoints every "
        f"{interval} steps"
    )
    print(
        f"  ft-on: groups replaced {ft['replaced']} (one per worker killed), failures survived "
        f"{ft['survived']} (groups lost from a quorum), steps committed with fewer groups "
        f"{ft['degraded']}; restart: worker group restarts {rs['restarts']}"
    )
    if ft["gaps"] or rs["gaps"]:  # none expected: a dead writer's rows come as copies
        print(f"  steps without a metrics row: ft-on {ft['gaps']}, restart {rs['gaps']}")
    print(
        f"  effective throughput ft-on / restart, from first step  "
        f"{ft['first'] / rs['first']:6.2f}  [>= 2.3]  ({ft['span']:.1f} s vs {rs['span']:.1f} s)"
    )
    print(
        f"  effective throughput ft-on / restart, from launch      "
        f"{ft['launch'] / rs['launch']:6.2f}  [>= 2.0]  ({ft['wall']:.1f} s vs {rs['wall']:.1f} s)"
    )
    if "clean" in result:
        report_clean(result["clean"], result["size"])
    if "term" in result:
        report_term(result["term"], result["size"])
