"""chDB with the platform schema, and loading synthetic records into it.

chDB runs one embedded server per process: every session sees the same tables, so each test
writes its own run name and deletes its rows when done. The session is a module's and is
closed after it, so later tests of the same process can open a run's store (a folder)."""

from __future__ import annotations

import uuid
from contextlib import contextmanager

import pytest

from observability import clickhouse
from observability.synthetic import generate, insert_chdb

TEAM = "obs-test"


@pytest.fixture(scope="module")
def chdb_session():
    from chdb import session as chdb_session

    s = chdb_session.Session()
    clickhouse.apply(s)
    yield s
    s.close()


@contextmanager
def loaded(session, folder, scenario, seed: int):
    """A fresh run holding the scenario's records; its name, its columns; rows deleted after."""
    run = f"syn-{uuid.uuid4().hex[:10]}"
    cols = generate(scenario, seed)
    insert_chdb(session, scenario, cols, folder, TEAM, run)
    try:
        yield run, cols
    finally:
        session.query(f"DELETE FROM platform.nccl_collectives WHERE run = '{run}'")
