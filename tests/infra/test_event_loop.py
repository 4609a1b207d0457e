"""The program runs under Pulumi's mocks after other code in this thread used asyncio.run
(which leaves no current event loop): the mocks make one."""

from __future__ import annotations

import asyncio

from infra.mocks import ProgramRun, run


def test_program_runs_after_asyncio_run():
    asyncio.run(asyncio.sleep(0))
    record = run("ultra-usc1", record=ProgramRun())
    assert record.resources
