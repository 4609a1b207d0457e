"""The flags naming where a ClickHouse sign-in comes from, shared by `runner ui` and
`runner diagnose`: environment variable names only, never a user or password."""

from __future__ import annotations

import click


def credential_options(function):
    """`--user-env NAME` (CLICKHOUSE_USER) and `--password-env NAME` (CLICKHOUSE_PASSWORD)."""
    function = click.option(
        "--password-env",
        default="CLICKHOUSE_PASSWORD",
        show_default=True,
        help="Environment variable holding the ClickHouse password.",
    )(function)
    return click.option(
        "--user-env",
        default="CLICKHOUSE_USER",
        show_default=True,
        help="Environment variable holding the ClickHouse user.",
    )(function)
