"""One trainer for every layout: a short loop, a stepper, and hooks (docs/driver.md).

- `worker.train_worker`: what each Ray Train worker runs (hello, labelled log, failure
  record, the final figures);
- `build.build_trainer`: the worker's parts from the run's config: device, workload, batch
  feed (driver.data.feed), model and optimizer, the stepper, checkpoint session and resume,
  auxiliary services, DiLoCo learner, and the hooks in order;
- `loop.Trainer`: the loop: step, hooks after each committed step, stop, close;
- `core.StepCore`: what both steppers share (forward/backward of micro-batch slots,
  clipping, the metrics row); `plain.PlainStepper` (DDP or FSDP2/HSDP); the torchft stepper
  is driver.ft.stepper.FtStepper;
- `hooks`: checkpoint, auxiliary services, DiLoCo, the reporter, fault injection, the feed.
"""
