"""Harnesses that tests and benchmarks share; none of it ships with the platform.

Production packages (driver, runner, warden, observability, catalog, infra) never import
this package (tests/test_imports.py checks it). Its processes are started from the
repository root, as `python -m tests.support.<module> ...`.

- `ft_drill`: one replica group of a small fault-tolerance job as a process
  (`python -m tests.support.ft_drill SPEC.json`); `ft_drill_job` the job it trains (the
  model, its fixed data, the digest of its weights, the failure-free reference losses);
  `ft_harness.Drill` runs a drill as real processes (a Lighthouse, one process per group,
  SIGKILLs on schedule). Used by tests/ft and scripts/bench/ft_bench.py.
- `diloco_local`: a local DiLoCo run of small trainer processes (a synchronizer and N
  learners, `python -m tests.support.diloco_local --learners 2 ...`). Used by tests/diloco
  and scripts/bench/diloco_bench.py.
"""
