"""NCCL Inspector output: its JSON lines into `platform.nccl_collectives` rows.

The Inspector profiler plugin (NVIDIA/nccl `plugins/profiler/inspector`, formerly
`ext-profiler/inspector`; output format v4.0) writes `<hostname>-pid<pid>.log` in
`NCCL_INSPECTOR_DUMP_DIR`: one compact JSON object per line, per completed operation of a
communicator:

    {"header":{"id":"0x7f8c496ae9f661","comm_name":"...","rank":2,"n_ranks":16,"nnodes":2},
     "metadata":{"inspector_output_format_version":"v4.0","git_rev":"...",
                 "rec_mechanism":"nccl_profiler_interface","dump_timestamp_us":1748030377748202,
                 "hostname":"node-7","pid":1639453},
     "coll_perf":{"coll":"AllReduce","coll_sn":1407,"coll_msg_size_bytes":17179869184,
                  "coll_exec_time_us":61974,"coll_timing_source":"kernel_gpu",
                  "coll_algobw_gbs":277.210914,"coll_busbw_gbs":485.119099}}

(`comm_name` is in newer releases; `p2p_perf` lines, sends and receives, are skipped;
verbose mode adds `event_trace_*` inside `coll_perf`). In a cluster Fluent Bit ships the
lines and the materialized view in schema.sql maps them; `rows` is the same mapping for a
local run or a recorded file:

    python -m observability.inspector FILE... [--run R --team T --pod P]   # JSONEachRow
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path

FORMAT_VERSIONS = ("v4.0",)
IDENTITY = ("cluster", "team", "run", "namespace", "pod")


class InspectorError(ValueError):
    """A line that is not an Inspector record; the message names the file and line."""


def _field(record: dict, section: str, key: str, kind: type, where: str):
    value = record.get(section, {}).get(key)
    if kind is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if kind is float and value == "nan":  # the Inspector writes NaN as the string "nan"
        return float("nan")
    if not isinstance(value, kind) or isinstance(value, bool):
        raise InspectorError(f"{where}: {section}.{key} is missing or not {kind.__name__}")
    return value


def timestamp(micros: int) -> str:
    """`DateTime64(6)` text of epoch microseconds (exact: no float on the way)."""
    moment = datetime.fromtimestamp(micros // 1_000_000, UTC).replace(microsecond=micros % 10**6)
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")


def collective(record: dict, where: str = "<record>") -> dict | None:
    """The nccl_collectives columns of one parsed Inspector record (None for p2p records)."""
    if "coll_perf" not in record:
        if "p2p_perf" in record:
            return None
        raise InspectorError(f"{where}: neither coll_perf nor p2p_perf")
    version = record.get("metadata", {}).get("inspector_output_format_version")
    if version not in FORMAT_VERSIONS:
        raise InspectorError(f"{where}: output format {version!r}, known: {FORMAT_VERSIONS}")
    f = lambda section, key, kind: _field(record, section, key, kind, where)  # noqa: E731
    stamp = f("metadata", "dump_timestamp_us", int)
    return {
        "ts": timestamp(stamp),
        "node": f("metadata", "hostname", str),
        "pid": f("metadata", "pid", int),
        "comm_id": f("header", "id", str),
        "comm_name": record["header"].get("comm_name", ""),
        "rank": f("header", "rank", int),
        "n_ranks": f("header", "n_ranks", int),
        "n_nodes": f("header", "nnodes", int),
        "collective": f("coll_perf", "coll", str),
        "seq": f("coll_perf", "coll_sn", int),
        "msg_size_bytes": f("coll_perf", "coll_msg_size_bytes", int),
        "exec_time_us": f("coll_perf", "coll_exec_time_us", float),
        "timing_source": record["coll_perf"].get("coll_timing_source", ""),
        "algbw_gbs": f("coll_perf", "coll_algobw_gbs", float),
        "busbw_gbs": f("coll_perf", "coll_busbw_gbs", float),
    }


def parse_lines(lines: Iterable[str], source: str = "<lines>") -> Iterator[dict]:
    """Collective rows of Inspector lines (blank lines skipped)."""
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{source}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise InspectorError(f"{where}: not JSON ({err.msg})") from None
        if not isinstance(record, dict):
            raise InspectorError(f"{where}: not a JSON object")
        row = collective(record, where)
        if row is not None:
            yield row


def rows(paths: Iterable[str | Path], identity: dict[str, str] | None = None) -> Iterator[dict]:
    """Rows of Inspector files with the run's identity (cluster, team, run, namespace, pod)."""
    ident = {k: (identity or {}).get(k, "") for k in IDENTITY}
    for path in paths:
        with open(path, encoding="utf-8") as lines:
            for row in parse_lines(lines, str(path)):
                yield {**ident, **row}


def insert_chdb(session, rows_: Iterable[dict], table: str = "platform.nccl_collectives") -> int:
    """Insert rows into a chDB session's table (JSONEachRow); how many."""
    batch = [json.dumps(r) for r in rows_]
    if batch:
        session.query(f"INSERT INTO {table} FORMAT JSONEachRow\n" + "\n".join(batch))
    return len(batch)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="NCCL Inspector files as JSONEachRow rows")
    parser.add_argument("files", nargs="+")
    for key in IDENTITY:
        parser.add_argument(f"--{key}", default="")
    args = parser.parse_args(argv)
    try:
        for row in rows(args.files, {k: getattr(args, k) for k in IDENTITY}):
            print(json.dumps(row))
    except (InspectorError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
