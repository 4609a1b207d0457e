"""Fail fast on storage the run cannot write: checked before Ray Train starts, bounded.

    problem = check_storage(cfg, output_dir)   # None, or a StorageProblem (one line)

Ray Train's `StorageContext` writes a validation file into the run's storage when the
trainer starts, through pyarrow; on a machine without access to the bucket (no credentials,
no route, a name that does not resolve) pyarrow's GCS client retries for up to 15 minutes
inside native code, where the driver's signal handlers cannot run. The checkpointer writes
through fsspec (gcsfs for `gs://`), a second client with its own credential lookup. So
before anything starts, each URI the run writes is probed the way both clients write it:
make the folder, write and remove a small object, in daemon threads, for at most
`checkpoint.storage_timeout_s`. The first failure, or the deadline, ends the run with one
line naming the field, the URI and the reason (the last error the clients logged, when
they only retried).

`ray_storage_uri` is where Ray Train keeps the run's files (the trainer's `storage_path`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from catalog.errors import first_line
from driver.checkpoint.storage import is_local, local_path

PROBE = ".reve-storage-probe"
CLIENT_LOGGERS = ("gcsfs", "fsspec", "google", "google.auth", "aiohttp")


@dataclass(frozen=True)
class StorageProblem:
    field: str
    uri: str
    reason: str

    def line(self) -> str:
        return f"{self.field}: cannot write {self.uri}: {self.reason}"


def ray_storage_uri(cfg, output_dir: Path) -> str:
    """Ray Train's storage path for the run: `<root>/<team>/<run>` on an object store,
    else `<output_dir>/ray`."""
    root = cfg.checkpoint.root
    if "://" in root and not root.startswith("file://"):
        return f"{root.rstrip('/')}/{cfg.run.team}/{cfg.run.name}"
    return str((Path(output_dir) / "ray").resolve())


def storage_targets(cfg, output_dir: Path) -> list[tuple[str, str, tuple[str, ...]]]:
    """(field, URI, clients) the run writes before and while it trains: Ray Train's
    storage (pyarrow) and the checkpoints (fsspec), once each."""
    ray_uri = ray_storage_uri(cfg, output_dir)
    targets = [("checkpoint.root", ray_uri, ("pyarrow", "fsspec"))]
    ckpt = f"{cfg.checkpoint.root.rstrip('/')}/{cfg.run.team}/{cfg.run.name}"
    if cfg.checkpoint.active and ckpt != ray_uri:
        targets.append(("checkpoint.root", ckpt, ("fsspec",)))
    return targets


def probe_fsspec(uri: str) -> None:
    import fsspec

    fs, path = fsspec.core.url_to_fs(uri)
    fs.makedirs(path, exist_ok=True)
    name = f"{path.rstrip('/')}/{PROBE}-{uuid.uuid4().hex[:8]}"
    fs.pipe_file(name, b"")
    fs.rm(name)


def probe_pyarrow(uri: str) -> None:
    import pyarrow.fs

    fs, path = pyarrow.fs.FileSystem.from_uri(uri)
    fs.create_dir(path)
    name = f"{path.rstrip('/')}/{PROBE}-{uuid.uuid4().hex[:8]}"
    with fs.open_output_stream(name):
        pass
    fs.delete_file(name)


PROBES = {"fsspec": probe_fsspec, "pyarrow": probe_pyarrow}


class LastMessage(logging.Handler):
    """Keeps the newest warning the storage clients log (what they retry on) and keeps
    them off the terminal while the probe runs."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.text = ""

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage().strip().splitlines()
        if message:
            line = message[0]
            self.text = line if len(line) <= 160 else line[:159] + "…"


@contextlib.contextmanager
def quiet_clients():
    handler, saved = LastMessage(), {}
    for name in CLIENT_LOGGERS:
        logger = logging.getLogger(name)
        saved[name] = logger.propagate
        logger.addHandler(handler)
        logger.propagate = False
    try:
        yield handler
    finally:
        for name, propagate in saved.items():
            logging.getLogger(name).removeHandler(handler)
            logging.getLogger(name).propagate = propagate


def run_probes(jobs: list[tuple[str, str]], timeout_s: float) -> dict[tuple[str, str], str]:
    """Run each (client, URI) probe in a daemon thread; {job: problem} for the ones that
    failed, or all that had not answered when the first failed or `timeout_s` passed."""
    results: dict[tuple[str, str], str | None] = {}
    done = threading.Condition()

    def run(job: tuple[str, str]) -> None:
        try:
            PROBES[job[0]](job[1])
            outcome = None
        except Exception as err:  # noqa: BLE001 (any client error is the answer)
            outcome = first_line(err, typed=True)
        with done:
            results[job] = outcome
            done.notify_all()

    for job in jobs:
        threading.Thread(target=run, args=(job,), name=f"probe-{job[0]}", daemon=True).start()
    deadline = time.monotonic() + timeout_s
    with done:
        while len(results) < len(jobs) and not any(results.values()):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            done.wait(left)  # a signal's handler runs here (the wait is interruptible)
        failed = {job: text for job, text in results.items() if text}
    if failed:
        return failed
    return {job: "" for job in jobs if job not in results}


def check_storage(cfg, output_dir: Path, timeout_s: float | None = None) -> StorageProblem | None:
    """None when the run can write everything it will write; else the first problem."""
    timeout_s = cfg.checkpoint.storage_timeout_s if timeout_s is None else timeout_s
    targets = storage_targets(cfg, output_dir)
    jobs = [(client, uri) for _, uri, clients in targets for client in clients
            if not (client == "pyarrow" and is_local(uri))]  # fmt: skip
    with quiet_clients() as last:
        if cfg.debug.hang_storage_check:
            native_hang()
        problems = run_probes(jobs, timeout_s)
    if not problems:
        return None
    (client, uri), reason = next(iter(sorted(problems.items())))
    field = next(f for f, u, _ in targets if u == uri)
    if not reason:
        reason = f"no answer within {timeout_s:g} s"
        reason += f" (last: {last.text})" if last.text else ""
    shown = local_path(uri) if is_local(uri) else uri
    return StorageProblem(field, shown, reason)


def native_hang() -> None:
    """`debug.hang_storage_check`: block this thread in native code for good, where no
    Python signal handler runs (as pyarrow's GCS client retrying does), to drill the stop
    deadline: a non-recursive mutex locked twice by one thread."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    mutex = ctypes.create_string_buffer(64)
    libc.pthread_mutex_init(mutex, None)
    libc.pthread_mutex_lock(mutex)
    libc.pthread_mutex_lock(mutex)
