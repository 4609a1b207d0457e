"""Live fault tolerance with torchft: replica groups that survive the loss of a group.

- the `ft.*` keys are `driver.config.ft.FtConfig` (no torch import).
- `batch`: which micro-batch slots each live group trains on; the LR rule (pure).
- `lighthouse.DriverSide`: the Lighthouse and the start gate, on the driver.
- `replica.FtReplica`: a Manager per replica group, the step protocol, healing, metrics.
  `manager` builds its torchft Manager and SUMs gradients through it; `plan.StepPlan`: a
  step's slots, loss divisor and LR multiplier (pure).
- `shrink`: the request the lowest live group sends after a group is dropped.
- `target`: the shrink request's RayCluster worker group and Warden, from the pod env.
- `launch.trainer_parts`: the driver's TorchftConfig, FailureConfig and start gate.
- `stop`: below `ft.min_replicas` the run ends at once (a Ray Train controller callback),
  `stop_reason` gives the one-line reason.
- `stepper.FtStepper`: one step of one replica group, the stepper of the one trainer
  (driver.trainer) under torchft (`ft.enabled`); checkpoints through
  `session.FtCheckpointSession` (the lowest live group writes); `end` and `records`: the
  end of the run and the rows of a writer that died.

The fault-tolerance drill that tests and the benchmark run (one replica group of a small
job as a process) is `tests.support.ft_drill`, outside the platform. See docs/ft.md.
"""
