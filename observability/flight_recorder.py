"""PyTorch flight recorder: settings for training ranks, reading dumps, and their analysis.

The flight recorder (torch.distributed, c10d `FlightRecorder`) keeps the last N collectives
of every process group in a ring buffer. With `env(...)` in a rank's environment before its
process group starts, a collective timeout makes NCCL's watchdog dump the buffer to
`<output>/flight-recorder/rank_<global rank>` (a pickle: the watchdog has no JSON option), and
`snapshot()` returns the same content as JSON for a rank to attach to its failure report
(torch's `_dump_nccl_trace_json` / `_dump_fr_trace_json`: JSON, preferred).

Reading never trusts a pickle: `load` accepts JSON, or a pickle made only of plain
containers and scalars (what c10d writes); any class or callable in it is refused.
`analyse({rank: dump})` gives, per process group, each rank's last collective, the ranks that
never entered the group's latest collective, and collectives whose op or sizes differ
between ranks at the same sequence number.
"""

from __future__ import annotations

import io
import json
import pickle
from pathlib import Path

DUMP_DIR = "flight-recorder"
PREFIX = "rank_"
MAX_BYTES = 256 * 2**20


def env(output_dir: str | Path, buffer_size: int = 2000, dump_on_timeout: bool = True,
        timing: bool = False) -> dict[str, str]:  # fmt: skip
    """Environment of a training rank: a buffer of `buffer_size` entries (0: off), dumps to
    `<output_dir>/flight-recorder/rank_<rank>` on a collective timeout, and with `timing`
    the collectives' durations (CUDA events: a little overhead)."""
    if buffer_size <= 0:
        return {}
    size, prefix = str(int(buffer_size)), str(Path(output_dir) / DUMP_DIR / PREFIX)
    out = {
        "TORCH_FR_BUFFER_SIZE": size,
        "TORCH_NCCL_TRACE_BUFFER_SIZE": size,  # the name before torch 2.9, still read
        "TORCH_FR_DUMP_TEMP_FILE": prefix,
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": prefix,
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1" if dump_on_timeout else "0",
    }
    if timing:
        out["TORCH_NCCL_ENABLE_TIMING"] = "1"
    return out


def prepare(output_dir: str | Path) -> Path:
    """Create the dump folder (the watchdog writes the file but makes no folder)."""
    folder = Path(output_dir) / DUMP_DIR
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def snapshot() -> dict | None:
    """This process's flight recorder as a dict, through torch's JSON dump (None when torch
    has none or nothing was recorded)."""
    try:
        import torch._C._distributed_c10d as c10d
    except ImportError:
        return None
    for name in ("_dump_nccl_trace_json", "_dump_fr_trace_json"):
        fn = getattr(c10d, name, None)
        if fn is None:
            continue
        try:
            text = fn(includeCollectives=True, onlyActive=False)
        except RuntimeError:  # e.g. the NCCL variant in a process without NCCL groups
            continue
        dump = json.loads(text)
        if dump.get("entries"):
            return normalize(dump)
    return None


class DumpError(ValueError):
    """A dump that cannot be read; the message names the file."""


class _PlainUnpickler(pickle.Unpickler):
    """Unpickles containers and scalars only: no class, function or persistent id."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refused {module}.{name}")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("refused a persistent id")


def load(path: str | Path) -> dict:
    """A dump file (JSON or c10d's pickle), normalized."""
    path = Path(path)
    data = path.read_bytes()
    if len(data) > MAX_BYTES:
        raise DumpError(f"{path}: {len(data)} bytes, more than {MAX_BYTES}")
    try:
        if data[:1] in (b"{", b" ", b"\n"):
            dump = json.loads(data)
        else:
            dump = _PlainUnpickler(io.BytesIO(data)).load()
    except (pickle.UnpicklingError, json.JSONDecodeError, EOFError, ValueError) as err:
        raise DumpError(f"{path}: not a flight recorder dump ({err})") from None
    if not isinstance(dump, dict) or "version" not in dump:
        raise DumpError(f"{path}: not a flight recorder dump (no version)")
    return normalize(dump)


def normalize(dump: dict) -> dict:
    """One shape for both formats: process_group a list, pg_status numbers, times None
    when unknown (the JSON form writes 0)."""
    entries = []
    for e in dump.get("entries", []):
        e = dict(e)
        e["process_group"] = list(e.get("process_group", ("", "")))
        for key in ("time_discovered_started_ns", "time_discovered_completed_ns"):
            e[key] = e.get(key) or None
        entries.append(e)
    status = {
        str(pg): {k: int(v) for k, v in values.items()}
        for pg, values in dump.get("pg_status", {}).items()
    }
    return {**dump, "entries": entries, "pg_status": status}


def rank_of(path: Path) -> int | None:
    """The global rank in a dump file's name (`rank_3`, `rank_3.json`), else None."""
    digits = path.name.removesuffix(".json").removeprefix(PREFIX)
    return int(digits) if path.name.startswith(PREFIX) and digits.isdigit() else None


def load_dir(folder: str | Path) -> tuple[dict[int, dict], list[str]]:
    """Every dump in a folder by rank (a JSON dump wins over a pickle of the same rank), and
    one line per file that could not be read."""
    dumps: dict[int, dict] = {}
    errors: list[str] = []
    for path in sorted(Path(folder).glob(f"{PREFIX}*"), key=lambda p: p.suffix != ".json"):
        rank = rank_of(path)
        if rank is None or rank in dumps:
            continue
        try:
            dumps[rank] = load(path)
        except (DumpError, OSError) as err:
            errors.append(str(err))
    return dumps, errors
