"""A worker's start-up does not import DCP (torch.distributed.checkpoint, about a second):
the checkpoint session, checkpointer and state load it at the first save or load."""

from __future__ import annotations

import subprocess
import sys


def test_the_checkpoint_session_imports_without_dcp():
    code = (
        "import sys, driver.trainer.worker, driver.trainer.build\n"
        "import driver.checkpoint.session, driver.checkpoint.checkpointer\n"
        "from driver.checkpoint import TrainState\n"
        "print(sorted(m for m in sys.modules if m.startswith('torch.distributed.checkpoint')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
