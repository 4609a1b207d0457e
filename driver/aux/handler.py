"""What a service implements: a `Handler` that a `WorkerServer` calls for each request.

class Encoder:
    def setup(self): self.model = load()                  # once, may be slow
    def ready(self): return {"model": "t5-small"}          # raise to fail start-up
    def handle(self, method, payload, ctx):                # payload: JSON-able + arrays
        return {"emb": self.model(payload["tokens"])}

handler = load_handler("my_pkg.services:Encoder", {"device": "cpu"})
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class RequestContext:
    """What a handler knows about the request it serves."""

    rank: int
    """Training rank that sent the request (the fair-queue key)."""
    request_id: int
    """The caller's request id (unique per client)."""
    deadline: float
    """Absolute `time.time()` after which the caller no longer waits for the reply."""


@runtime_checkable
class Handler(Protocol):
    """A service's request handler (one instance per worker; calls are not concurrent)."""

    def setup(self) -> None: ...

    def ready(self) -> dict: ...

    def handle(self, method: str, payload: dict, ctx: RequestContext) -> dict: ...


def load_handler(spec: str, kwargs: dict[str, Any]) -> Handler:
    """Instantiate "package.module:Class" with `kwargs`; errors name the spec."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"handler {spec!r}: expected 'package.module:Class'")
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"handler {spec!r}: {err}") from err
    handler = target(**kwargs)
    missing = [n for n in ("setup", "ready", "handle") if not callable(getattr(handler, n, None))]
    if missing:
        raise ValueError(f"handler {spec!r}: missing {', '.join(missing)}")
    return handler
