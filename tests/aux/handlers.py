"""Handlers for the services' end-to-end tests (imported by Ray workers by name)."""

from __future__ import annotations

import time


class SlowStart:
    """Takes `setup_s` to start: longer than a short ready_timeout_s."""

    def __init__(self, setup_s: float = 30.0, **ignored):
        self.setup_s = setup_s

    def setup(self) -> None:
        time.sleep(self.setup_s)

    def ready(self) -> dict:
        return {}

    def handle(self, method, payload, ctx) -> dict:
        return {}
