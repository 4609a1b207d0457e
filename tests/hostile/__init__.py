"""Hostile peers against the driver's serving loops, shared by the tests (a subset of the
cases, tests/*/test_hostile_*.py) and `scripts/bench/hostile_bench.py` (1,000 per loop).

- `targets.py`: a serving loop under attack in a process of its own (the auxiliary proxy,
  an auxiliary worker, the run's channel, the DiLoCo synchronizer, a DiLoCo learner's
  link), asked for its stats, liveness and memory over a JSON control pipe;
- `cases.py`: the raw messages (deep nesting, huge and split frames, garbage, truncated
  and non-finite values, wrong kinds and tokens) and the slow senders;
- `suites.py`: one suite per loop: many peers sending the cases in turn, a legitimate
  call every `CHECK_EVERY` cases, and the figures (`Report`).

    report = suites.run("proxy", cases=1000, limit=64 << 20)
    assert report.threads_lost == 0 and report.growth_per_peer_mib <= 64
"""
