"""Load a benchmark script of scripts/bench/ as a module, for tests of its pure pieces."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[1] / "scripts" / "bench"


def load_bench(name: str) -> ModuleType:
    """`scripts/bench/<name>.py` as a module named `name`."""
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
