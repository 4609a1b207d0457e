"""Harnesses that tests and benchmarks share; none of it ships with the platform.

The production packages (those pyproject.toml ships: driver, runner, warden, observability,
catalog, infra) never import this package (tests/test_imports.py checks it). Its processes
run as `python -m tests.support.<module> ...` from the repository root, or anywhere with
`env()` (the repository root on PYTHONPATH).

- `ft_drill`: one replica group of a small fault-tolerance job as a process
  (`python -m tests.support.ft_drill SPEC.json`); `ft_drill_job` the job it trains (the
  model, its fixed data and sample ids, the digest of its weights, the failure-free
  reference losses); `ft_harness.Drill` runs a drill as real processes (a Lighthouse, one
  process per group, SIGKILLs on schedule). Used by tests/ft and scripts/bench/ft_bench.py.
- `diloco_trainer`: one DiLoCo learner as a plain process over the reference LM
  (`python -m tests.support.diloco_trainer ...`); `diloco_local` a synchronizer and N such
  learners (`python -m tests.support.diloco_local --learners 2 ...`); `slowlink` a slow
  cross-region link on one machine (network namespaces, veth, `tc tbf`; needs root). Used
  by tests/diloco and scripts/bench/diloco_bench.py.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository root."""


def env() -> dict[str, str]:
    """This process's environment with the repository root first on PYTHONPATH: a child
    started with it finds `tests.support` from any working directory."""
    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
