"""Benchmark of `runner`: renders per second and CLI start-up against `python -c pass`.

    .venv/bin/python scripts/bench/runner_bench.py [--runs 1000] [--starts 10]

1. Renders 1,000 generated run definitions (types, clusters, accelerators, GPU counts, pods,
   env, rack affinity, priority vary; seeded): spec checks, catalog resolution, template,
   YAML parse, validation of every object and the apps/ text. Goal: >= 200 renders/s. Peer:
   PyYAML's `safe_dump_all` writing the same manifests, timed in the same run (a ratio that a
   busy machine changes less than the wall rate).
2. `runner --help` wall time divided by `python -c pass` wall time, both measured here
   (median of --starts runs each). Goal: <= 4.
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
DIGEST = "sha256:" + "5e" * 32
TRAIN = {"ultra-usc1": "runs/train/tiny-lm.yaml", "mega-euw4": "runs/train/tiny-dit.yaml"}
ACCELERATOR = {"ultra-usc1": "H200", "mega-euw4": "H100"}


def generate(count: int, seed: int = 7) -> list[dict]:
    """`count` valid, varied run definitions."""
    rng = random.Random(seed)
    runs = []
    for i in range(count):
        cluster = rng.choice(["ultra-usc1", "mega-euw4"])
        kind = rng.choice(["rayjob", "rayjob", "raycluster", "job"])
        run = {
            "name": f"bench-{i}",
            "type": kind,
            "cluster": cluster,
            "namespace": rng.choice(["research", "media"]),
            "image": f"us-docker.pkg.dev/p/training/trainer-{i % 7}@{DIGEST}",
            "pods": rng.randint(1, 16),
        }
        if rng.random() < 0.8:
            run["accelerator"] = ACCELERATOR[cluster]
            run["gpus"] = rng.choice([1, 2, 4, 8, 8, 8]) if run["pods"] == 1 else 8
            run["rack_affinity"] = rng.choice([None, "block", "subblock"])
        if kind == "job" or (kind == "rayjob" and rng.random() < 0.3):
            run["cmd"] = f"python -m bench.step --seed {i}"
        elif kind == "rayjob":
            run["train_config"] = TRAIN[cluster]
            run["train_overrides"] = [f"optim.lr={rng.choice(['1e-3', '3e-4'])}"]
        if rng.random() < 0.3:
            run["env"] = {f"VAR_{j}": str(rng.randint(0, 99)) for j in range(rng.randint(1, 4))}
        if rng.random() < 0.2 and cluster == "ultra-usc1":
            run["preemptible"] = True
        runs.append({k: v for k, v in run.items() if v is not None})
    return runs


def bench_renders(count: int) -> tuple[float, float, float, float]:
    """(renders per wall second, per CPU second, validation's share of the wall time,
    render time / the time PyYAML's safe_dump_all takes to write the same manifests)."""
    import yaml

    import runner.render as render_module
    from runner.commands.render import apps_text
    from runner.render import render
    from runner.spec import build_spec

    runs = generate(count)
    spent = [0.0]
    original = render_module.validate_manifests

    def timed(*args, **kwargs):
        begin = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - begin

    render_module.validate_manifests = timed
    outputs = []
    start, cpu = time.perf_counter(), time.process_time()
    for run in runs:
        rendered = render(build_spec(run, "runs/bench.yaml"))
        apps_text(rendered)
        outputs.append(rendered.manifests)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    render_module.validate_manifests = original
    begin = time.perf_counter()
    for manifests in outputs:
        yaml.safe_dump_all(manifests, sort_keys=False)
    peer = time.perf_counter() - begin
    return count / elapsed, count / cpu, spent[0] / elapsed, elapsed / peer


def median_wall(argv: list[str], starts: int) -> float:
    times = []
    for _ in range(starts):
        begin = time.perf_counter()
        subprocess.run(argv, cwd=ROOT, check=True, capture_output=True)
        times.append(time.perf_counter() - begin)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--starts", type=int, default=10)
    args = parser.parse_args(argv)

    rate, cpu_rate, validation, peer = bench_renders(args.runs)
    print(
        f"renders: {rate:.0f}/s wall, {cpu_rate:.0f}/s per CPU second, over {args.runs} run "
        f"definitions (goal >= 200/s: ratio {rate / 200:.2f} wall, {cpu_rate / 200:.2f} CPU); "
        f"validation {validation:.0%} of the time; one render costs {peer:.2f}x PyYAML "
        "safe_dump_all of its own manifests"
    )
    cli = median_wall([sys.executable, "-m", "runner", "--help"], args.starts)
    bare = median_wall([sys.executable, "-c", "pass"], args.starts)
    print(
        f"start-up: runner --help {cli * 1000:.0f} ms, python -c pass {bare * 1000:.0f} ms, "
        f"ratio {cli / bare:.2f} (goal <= 4)"
    )


if __name__ == "__main__":
    main()
