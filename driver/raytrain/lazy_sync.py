"""Ray Train's synchronization actor, created on first use (every run, embedded or not).

Ray Train 2.60 starts a `SynchronizationActor` with every worker group, beside the training
workers. It serves only Ray Train's collectives (`ray.train.report`, its barrier and
broadcast) and the controller's barrier resets; the driver's loop calls none of them (its
final figures go to the run's channel, driver.channel), so the actor would only cost CPU:
its process starts and imports Ray Train (about 1 s of CPU, taken from the training workers
while they start) and then wakes 100 times a second for Ray's signal check (0.6 % of a core
for the whole run).

`install()` makes the in-process controller (driver/raytrain/controller.py) create a
`LazySyncActor` instead: a picklable stand-in with the same methods that creates the real
actor, named after the worker group and with the options Ray Train gave it, the first time
anyone (the controller, or a worker it was handed to) calls one of its methods. It is created
detached, so whichever process creates it, the others keep reaching it, and the worker
group's shutdown kills it if it exists.

    restore = install()              # before the controller runs: worker groups get
    ...                              # LazySyncActor handles
    restore()                        # once it has stopped (never while it runs on)

A torchft replica-group replacement asks the actor to `reset` its barrier; a barrier that
was never made has nothing to reset, so that call creates no actor.
"""

from __future__ import annotations

import uuid

_STATE = "ray.train.v2._internal.execution.worker_group.state"
_GROUP = "ray.train.v2._internal.execution.worker_group.worker_group"
PREFIX = "train-sync-"


class LazySyncActor:
    """A `SynchronizationActor` handle that creates the actor on its first method call."""

    def __init__(self, name: str, namespace: str, options: dict, kwargs: dict):
        self.name, self.namespace = name, namespace
        self.options, self.kwargs = dict(options), dict(kwargs)
        self._handle = None

    def __reduce__(self):  # the handle stays behind: each process finds the actor by name
        return (LazySyncActor, (self.name, self.namespace, self.options, self.kwargs))

    def handle(self):
        """The real actor's handle: the existing one, or one created now."""
        if self._handle is None:
            from ray.train.v2._internal.execution.checkpoint.sync_actor import (
                SynchronizationActor,
            )

            self._handle = SynchronizationActor.options(
                name=self.name, namespace=self.namespace, get_if_exists=True,
                lifetime="detached", **self.options,
            ).remote(**self.kwargs)  # fmt: skip
        return self._handle

    def __getattr__(self, method: str):
        if method.startswith("_"):
            raise AttributeError(method)
        if method == "reset" and self.existing() is None:
            return _Done()  # no barrier yet, so no one waits at it
        return getattr(self.handle(), method)

    def existing(self):
        """The actor's handle if anyone created it, else None."""
        if self._handle is None:
            import ray

            try:
                self._handle = ray.get_actor(self.name, namespace=self.namespace)
            except ValueError:
                return None
        return self._handle

    def kill(self) -> None:
        """Kill the actor if anyone created it (a worker group's shutdown)."""
        import ray

        handle = self.existing()
        if handle is not None:
            ray.kill(handle)


class _Done:
    """An actor method whose call is already answered (`reset` of a barrier never made)."""

    def remote(self, *args, **kwargs):
        import ray

        return ray.put(None)


class LazyFactory:
    """What the worker group calls in place of the `SynchronizationActor` class:
    `.options(**options).remote(**kwargs)` returns a `LazySyncActor`."""

    def __init__(self, namespace: str, options: dict | None = None):
        self.namespace, self._options = namespace, dict(options or {})

    def options(self, **options) -> LazyFactory:
        return LazyFactory(self.namespace, {**self._options, **options})

    def remote(self, **kwargs) -> LazySyncActor:
        name = f"{PREFIX}{uuid.uuid4().hex[:12]}"
        return LazySyncActor(name, self.namespace, self._options, kwargs)


def shutdown_sync_actor(sync_actor) -> None:
    """The worker group's `_shutdown_sync_actor` for either kind of handle."""
    if isinstance(sync_actor, LazySyncActor):
        sync_actor.kill()
    else:
        import ray

        ray.kill(sync_actor)


def install():
    """From now on new worker groups get a `LazySyncActor`, and shutting one down kills
    either kind; returns the function that puts Ray Train's own names back."""
    import importlib

    import ray

    group, state = importlib.import_module(_GROUP), importlib.import_module(_STATE)
    saved = group.SynchronizationActor, state._shutdown_sync_actor
    group.SynchronizationActor = LazyFactory(ray.get_runtime_context().namespace)
    state._shutdown_sync_actor = shutdown_sync_actor

    def restore() -> None:
        group.SynchronizationActor, state._shutdown_sync_actor = saved

    return restore
