"""DiLoCo: local learners that train most steps alone and a synchronizer that merges them.

- `outer`: the pure maths (pseudo-gradients, the outer Nesterov step, compression, merge
  rules, when a round closes).
- `keys`: CurveZMQ key files (`python -m driver.diloco.keys DIR --learners a,b`).
- `link`: the authenticated, encrypted ZeroMQ link; messages in `driver.aux.wire`'s format.
- `state`: the synchronizer's outer state on disk (raw tensor frames + JSON, no pickle).
- `synchronizer`: the server (`python -m driver.diloco.synchronizer --help`).
- `learner`: the component a training loop calls after every optimizer step.
- `trainer`, `local`: a small learner process over the reference LM, and a local
  experiment (synchronizer + learners as processes on loopback).

How it works and how to run it: docs/diloco.md.
"""
