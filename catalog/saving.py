"""How long a run needs to stop, shared by the renderer (the pods' grace period) and the
driver (its stop deadline).

A stop (SIGTERM from Kubernetes, or Ctrl-C) gives the run `checkpoint.preemption_budget_s`
for its final checkpoint, then `STOP_MARGIN_S` for the rest: the workers leave the loop,
Ray Train ends the worker group, the driver writes the summary. The driver ends itself at
budget + margin after the first signal (driver.checkpoint.control.StopWatch); the runner
renders `terminationGracePeriodSeconds` no shorter, so Kubernetes' SIGKILL never comes first.
"""

from __future__ import annotations

STOP_MARGIN_S = 10.0
"""Seconds after the final checkpoint's budget for the run to end. Measured: a two-worker
tiny-LM run on the embedded Ray (2-core machine) exited 5.0 to 5.9 s after SIGINT, its
final save taking milliseconds and the notice reaching the workers 0.4 to 2.3 s after the
signal; the margin doubles what is left."""


def stop_grace_s(preemption_budget_s: float) -> float:
    """Seconds from the first stop signal until the run must have ended."""
    return float(preemption_budget_s) + STOP_MARGIN_S
