"""DiLoCo: local learners that train most steps alone and a synchronizer that merges them.

- `outer`: the pure maths (pseudo-gradients, the outer Nesterov step, compression, merge
  rules, when a round closes).
- `keys`: CurveZMQ key files (`python -m driver.diloco.keys DIR --learners a,b`).
- `link`: the authenticated, encrypted ZeroMQ link; messages in `driver.messaging.wire`'s format.
- `state`: the synchronizer's outer state on disk (raw tensor frames + JSON, no pickle).
- `synchronizer`: the server (`python -m driver.diloco.synchronizer --help`).
- `driver.config.diloco`: a learner's settings (`LearnerConfig`, the driver config's
  `diloco` section).
- `learner`: the component a training loop calls after every optimizer step (`make`:
  a `Learner`, or `streaming.Streaming` for a model synced in fragments); `weights`: the
  full weights of a whole or FSDP-sharded model, read and merged back per rank;
  `replicas`: a learner that is a torchft run (`FtLearner`).
- `resume`: a learner's sync state in its training checkpoint (`LearnerState`).
- `hook`: what the driver's loop calls (`prepare`, `checkpoint_state`, `start`, ...).
- `local`: an experiment on this machine (`python -m driver.diloco.local --plan`, what
  `runner run --local` runs: the synchronizer and each learner's driver as processes on
  loopback; `children` shows their lines and stops them).

Tests and the benchmark run small trainer processes as learners (`tests.support`:
`diloco_trainer`, `diloco_local`) over a slow link made on one machine (`slowlink`).

How it works and how to run it: docs/diloco.md.
"""

ENV = "REVE_DILOCO_"
"""Prefix of the environment variables that hold Curve keys from a Secret: the
synchronizer's (`keys.from_env`) and, by default, a learner's (`diloco.keys_env_prefix`)."""
