"""Click parameter types shared by the commands.

    @click.argument("run_file", type=PathArg(dir_okay=False))

`PathArg` is `click.Path` that refuses a name it cannot even look up (a NUL byte in it) as a
usage error, one line and exit 2, where `click.Path` raises ValueError.
"""

from __future__ import annotations

import click


class PathArg(click.Path):
    def convert(self, value, param, ctx):
        text = value.decode(errors="replace") if isinstance(value, bytes) else str(value)
        if "\x00" in text:
            self.fail(f"{text[:80]!r}: the name contains a NUL", param, ctx)
        return super().convert(value, param, ctx)
