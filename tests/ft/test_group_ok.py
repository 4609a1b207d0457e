"""The members of one replica group decide alike whether torchft's process group failed
(driver.ft.manager.group_ok), on a real group of two processes (gloo): member k of a group
reduces with member k of the other groups only, so one member can see a failure the other
did not; whichever saw it, both members get False. The run this keeps from hanging (a
group of 2 losing the group that talks to the DiLoCo synchronizer):
tests/diloco/test_ft.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MEMBER = """
import json, sys, torch.distributed as dist
from driver.ft.manager import group_ok
rank, store, cases = int(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)

class Manager:  # only what group_ok asks of torchft's Manager
    def __init__(self, failed):
        self.failed = failed
    def errored(self):
        return RuntimeError("peer gone") if self.failed else None

print(json.dumps([group_ok(Manager(case[rank])) for case in cases]))
dist.destroy_process_group()
from tests.support.gloo_exit import exit_now
exit_now()  # done: no finalization
"""

CASES = [
    ([False, False], True),
    ([True, False], False),  # member 0's collective failed, member 1's went through
    ([False, True], False),
    ([True, True], False),
]


def test_both_members_of_a_group_take_the_same_branch(tmp_path):
    script = tmp_path / "member.py"
    script.write_text(MEMBER)
    cases = json.dumps([errored for errored, _ in CASES])
    procs = [
        subprocess.Popen([sys.executable, str(script), str(rank), str(tmp_path / "store"), cases],
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                         text=True)
        for rank in (0, 1)
    ]  # fmt: skip
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    got = [json.loads(out.strip().splitlines()[-1]) for out in outs]
    assert got[0] == got[1] == [ok for _, ok in CASES]


def test_a_worker_alone_answers_for_itself():
    from driver.ft.manager import group_ok

    class Manager:
        def __init__(self, failed):
            self.failed = failed

        def errored(self):
            return RuntimeError("peer gone") if self.failed else None

    assert group_ok(Manager(False)) is True
    assert group_ok(Manager(True)) is False
