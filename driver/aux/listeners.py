"""Checkpoint callbacks of auxiliary workers: Ray actors that register by name.

Part of the auxiliary-services package: the checkpoint layer only hands rank 0's
Checkpointer a `RayListeners` (driver/checkpoint/session.py).

An auxiliary service (an evaluator, an exporter) that wants to hear about every committed
checkpoint starts a named actor in the run's Ray namespace with an `on_checkpoint(step, uri)`
method:

    Evaluator.options(name=listener_name("evaluator")).remote()

The training driver gives rank 0's Checkpointer a `RayListeners` callback, which calls
every such actor after each commit and waits (up to `timeout_s`) for them to take it.
"""

from __future__ import annotations

PREFIX = "checkpoint-listener:"


def listener_name(service: str) -> str:
    """The actor name under which `service` receives checkpoint callbacks."""
    if not service:
        raise ValueError("a checkpoint listener needs a service name")
    return f"{PREFIX}{service}"


def listener_names(names: list[str]) -> list[str]:
    """The registered listeners among a namespace's actor names, sorted."""
    return sorted(name for name in names if name.startswith(PREFIX) and len(name) > len(PREFIX))


class RayListeners:
    """A CheckpointCallback that calls every registered listener actor."""

    def __init__(self, timeout_s: float = 10.0):
        self.timeout_s = timeout_s

    def on_checkpoint(self, step: int, uri: str) -> None:
        import ray

        if not ray.is_initialized():  # no Ray, no listeners (and never start one: ray.util would)
            return
        names = listener_names(ray.util.list_named_actors())
        refs = [ray.get_actor(name).on_checkpoint.remote(step, uri) for name in names]
        if refs:
            ray.get(refs, timeout=self.timeout_s)  # a listener's error counts as a failure

    def __repr__(self) -> str:
        return "RayListeners()"
