"""Set-up shared by every test.

Under pytest-xdist (`./scripts/test` runs two workers) each worker gets a Ray folder of its
own (RAY_TMPDIR): a Ray process that looks for "the" local Ray with no address (Ray Train's
placement-group cleaner does, through the state API) reads the cluster address that Ray
wrote in that folder, so it finds its own worker's cluster, never the other worker's."""

from __future__ import annotations

import os
import shutil
import tempfile

_OWN_RAY_FOLDER = "REVE_TEST_RAY_TMPDIR"


def pytest_configure(config) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker and "RAY_TMPDIR" not in os.environ:
        folder = tempfile.mkdtemp(prefix=f"ray-{worker}-")
        os.environ["RAY_TMPDIR"] = os.environ[_OWN_RAY_FOLDER] = folder


def pytest_unconfigure(config) -> None:
    folder = os.environ.pop(_OWN_RAY_FOLDER, None)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)
