"""The platform's ClickHouse schema (`observability/sql/schema.sql`), split into statements
and applied to chDB or a server. It ships with the trainer image (the driver's local store
applies it); the kustomize generator copies it into the ClickHouse base, whose server runs it
at first start.

python -m observability.clickhouse            apply it to an in-process chDB and
                                              print the tables it creates
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

SCHEMA = Path(__file__).resolve().parent / "sql" / "schema.sql"
DATABASE = "platform"


def statements(sql: str) -> list[str]:
    """The SQL statements of a script: `--` comments dropped, split on `;` at line ends."""
    lines = [re.sub(r"^\s*--.*$", "", line) for line in sql.splitlines()]
    text = "\n".join(lines)
    parts = re.split(r";\s*(?:\n|$)", text)
    return [p.strip() for p in parts if p.strip()]


def apply(session, sql: str | None = None) -> int:
    """Run every statement on a chDB session (or anything with `.query(sql)`); the count."""
    todo = statements(sql if sql is not None else SCHEMA.read_text())
    for statement in todo:
        session.query(statement)
    return len(todo)


def main() -> int:
    from observability.store import chdb_session_module

    with chdb_session_module().Session() as session:
        count = apply(session)
        tables = session.query(f"SHOW TABLES FROM {DATABASE}", "CSV").bytes().decode()
    print(f"{count} statements applied; tables in {DATABASE}:")
    print(tables.replace('"', ""), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
