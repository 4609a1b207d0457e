"""The straggler analysis: SQL files under observability/sql/, run in chDB or ClickHouse.

    from observability import stragglers
    rows = stragglers.run_chdb(session, "straggler_ranks", team="research", run="tiny-lm",
                               start=t0, end=t1)          # list of dicts (frame_chdb: pandas)

Three queries, each one file (shared parts are `--@include`d): `straggler_ranks` (arrival
skew per rank per ~30 s window), `straggler_nodes` (per node per window) and
`straggler_findings` (persistent stragglers, handed to Warden). They are ClickHouse
parameterized queries (`{team:String}`): chDB and a ClickHouse server bind the parameters
themselves. `grafana_sql` writes the same text with Grafana's variables and time filter for
the `NCCL stragglers` dashboard (a test checks the committed dashboard holds it).
Method and thresholds: docs/observability.md.
"""

from __future__ import annotations

import json
import re
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

SQL_DIR = Path(__file__).resolve().parent / "sql"
QUERIES = ("straggler_ranks", "straggler_nodes", "straggler_findings")
INCLUDE = re.compile(r"^--@include (\S+)$", re.M)
PARAM = re.compile(r"\{(\w+):([^}]+)\}")
TIME_FILTER = "ts >= {start:DateTime64(6)} AND ts < {end:DateTime64(6)}"


@dataclass(frozen=True)
class Thresholds:
    """The analysis' knobs (each a query parameter of the same name)."""

    window_s: int = 30
    """length of a window: records are averaged per rank over windows this long."""
    min_delay_us: float = 100.0
    """a straggler arrives at least this much later than the median rank, on average."""
    mad_k: float = 6.0
    """... and more than this many robust standard deviations above the window's median."""
    min_fraction: float = 0.5
    """a persistent straggler is a straggler in at least this fraction of its windows ..."""
    min_duration_s: int = 120
    """... from its first to the end of its last straggler window, at least this long."""


DEFAULT = Thresholds()


def sql(name: str) -> str:
    """The text of query `name` with its includes expanded."""
    text = (SQL_DIR / f"{name}.sql").read_text()
    return INCLUDE.sub(lambda m: sql(Path(m.group(1)).stem).rstrip("\n"), text)


def timestamp(value: datetime | float | str) -> str:
    """A DateTime64(6) parameter value (UTC) from a datetime, epoch seconds or a string."""
    if isinstance(value, str):
        return value
    if not isinstance(value, datetime):
        value = datetime.fromtimestamp(float(value), UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def params(team: str, run: str, start, end, thresholds: Thresholds = DEFAULT) -> dict:
    """Every parameter the queries take."""
    return {"team": team, "run": run, "start": timestamp(start), "end": timestamp(end),
            **vars(thresholds)}  # fmt: skip


def used(name: str, values: dict) -> dict:
    """The parameters query `name` uses (a server rejects unknown ones)."""
    names = {m.group(1) for m in PARAM.finditer(sql(name))}
    return {k: v for k, v in values.items() if k in names}


def run_chdb(
    session, name: str, team: str, run: str, start, end, thresholds: Thresholds = DEFAULT
) -> list[dict]:
    """Rows of query `name` from a chDB session holding `platform.nccl_collectives`."""
    values = used(name, params(team, run, start, end, thresholds))
    text = session.query(sql(name), "JSONEachRow", params=values).bytes().decode()
    return [json.loads(line) for line in text.splitlines() if line]


def frame_chdb(
    session, name: str, team: str, run: str, start, end, thresholds: Thresholds = DEFAULT
):
    """`run_chdb` as a pandas DataFrame, read from chDB's columnar output (no JSON between):
    for callers that analyse the rows further (and the benchmark, whose peer is pandas)."""
    values = used(name, params(team, run, start, end, thresholds))
    return session.query(sql(name), "DataFrame", params=values)


def run_http(
    base_url: str, name: str, team: str, run: str, start, end,
    thresholds: Thresholds = DEFAULT, timeout_s: float = 60.0,
) -> list[dict]:  # fmt: skip
    """Rows of query `name` from a ClickHouse server's HTTP interface (`param_<name>`)."""
    values = used(name, params(team, run, start, end, thresholds))
    query = {"default_format": "JSONEachRow", **{f"param_{k}": v for k, v in values.items()}}
    url = f"{base_url.rstrip('/')}/?{urllib.parse.urlencode(query)}"
    request = urllib.request.Request(url, data=sql(name).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        text = response.read().decode()
    return [json.loads(line) for line in text.splitlines() if line]


def grafana_sql(name: str, thresholds: Thresholds = DEFAULT) -> str:
    """Query `name` as the Grafana ClickHouse datasource runs it: the dashboard's `team` and
    `run` variables, its time range (`$__timeFilter`), the thresholds as literals."""
    text = sql(name)
    if TIME_FILTER not in text and "{start:" in text:
        raise ValueError(f"{name}.sql: the time filter must read `{TIME_FILTER}`")
    text = text.replace(TIME_FILTER, "$__timeFilter(ts)")
    literals = {"team": "'${team}'", "run": "'${run}'"}
    literals.update({k: repr(v) for k, v in vars(thresholds).items()})

    def bind(m: re.Match) -> str:
        if m.group(1) not in literals:
            raise ValueError(f"{name}.sql: no Grafana value for parameter {m.group(1)}")
        return literals[m.group(1)]

    return PARAM.sub(bind, text)
