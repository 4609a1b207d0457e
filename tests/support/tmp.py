"""Temporary folders of the test servers and suites, removed when their process exits
(a test's own files go in pytest's `tmp_path`; these belong to helper processes and to
suites built outside a test function)."""

from __future__ import annotations

import atexit
import shutil
import tempfile


def temp_folder(prefix: str) -> str:
    """A new folder under the temp dir, removed at this process's normal exit."""
    folder = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder
