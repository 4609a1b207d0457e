"""The straggler benchmark runs end to end on a tiny configuration (no timing asserted)."""

from __future__ import annotations

import pytest

from tests.benches import load_bench


@pytest.fixture(scope="module")
def bench():
    return load_bench("straggler_bench")


def test_tiny_run_names_the_straggler(bench, chdb_session):
    lines = []
    result = bench.run(records=64 * 400, ranks=64, repeat=1, say=lines.append)
    assert result["records"] == 64 * 400
    assert result["named"] == (result["injected"],) * 3 == ({21},) * 3
    assert any(line.startswith("ratio chDB / pandas") for line in lines)
    assert any(line.startswith("before: load average") for line in lines)


def test_memory_table_has_the_platform_columns(bench):
    from observability import clickhouse

    ddl = bench.memory_ddl(clickhouse.SCHEMA.read_text())
    assert ddl.startswith(f"CREATE TABLE {bench.MEMORY}") and ddl.endswith("ENGINE = Memory")
    assert "instance         UInt64 MATERIALIZED" in ddl and "exec_time_us" in ddl


def test_records_must_cover_the_ranks(bench):
    with pytest.raises(SystemExit, match="--records 10 must be at least 2 x --ranks 64"):
        bench.scenario(10, 64)


def test_threads_must_not_be_negative(bench):
    with pytest.raises(SystemExit, match="--threads -1 must be 0 or more"):
        bench.main(["--threads", "-1"])
