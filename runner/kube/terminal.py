"""Attach this terminal to an exec websocket (`runner shell` on a real cluster).

Puts the local terminal in raw mode, copies keystrokes to the container's stdin and its
output to stdout, sends the window size on the resize channel, and returns the exit status.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import sys
from typing import Any

RESIZE_CHANNEL = 4


def attach(ws: Any) -> int:
    """Pump bytes between this terminal and `ws` until the remote command ends."""
    import termios
    import tty

    stdin = sys.stdin.fileno()
    interactive = os.isatty(stdin)
    saved = termios.tcgetattr(stdin) if interactive else None
    try:
        if interactive:
            tty.setraw(stdin)
            size = shutil.get_terminal_size()
            ws.write_channel(
                RESIZE_CHANNEL, json.dumps({"Width": size.columns, "Height": size.lines})
            )
        while ws.is_open():
            ws.update(timeout=0.1)
            if ws.peek_stdout():
                os.write(sys.stdout.fileno(), ws.read_stdout(timeout=0))
            readable, _, _ = select.select([stdin], [], [], 0)
            if readable:
                data = os.read(stdin, 4096)
                if not data:
                    ws.close_channel(0)
                else:
                    ws.write_stdin(data)
    finally:
        if saved is not None:
            termios.tcsetattr(stdin, termios.TCSADRAIN, saved)
    return ws.returncode or 0
