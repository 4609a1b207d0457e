"""After a checkpoint's shards are written: rank 0 commits (the marker last), applies the
retention policy and calls the checkpoint callbacks; every rank learns the outcome.

`Committing` is a mixin of `driver.checkpoint.checkpointer.Checkpointer`, which owns the
attributes it uses (rank, storage, config, counters, callbacks, the process group).
"""

from __future__ import annotations

import logging
import time

import torch.distributed as dist

from driver.checkpoint.auth import sha256_of, sign
from driver.checkpoint.errors import CheckpointError, summarize
from driver.checkpoint.layout import METADATA, Marker, join, step_dir, to_delete

log = logging.getLogger("driver.checkpoint")


def failures() -> tuple[type[BaseException], ...]:
    """What a DCP save or load raises: any Exception, and DCP's CheckpointException (a
    BaseException). Evaluated only while an error is handled, so DCP
    (torch.distributed.checkpoint, a second to import) loads at the first save or load,
    never at start-up."""
    from torch.distributed.checkpoint.api import CheckpointException

    return (Exception, CheckpointException)


class Committing:
    """Commit, failure bookkeeping, retention and callbacks of a Checkpointer."""

    @staticmethod
    def _call(fn, *args, **kwargs) -> BaseException | None:
        try:
            fn(*args, **kwargs)
        except failures() as exc:
            return exc
        return None

    def _finalize(self, step: int, uri: str, started: float, error: BaseException | None) -> bool:
        """After every rank's write: commit on rank 0, or record the failure."""
        if error is None and self.rank == 0:
            error = self._call(self._commit, step, uri, time.perf_counter() - started)
        error = self._rank0_outcome(error)
        self._last_ok = error is None
        if error is not None:
            self._failed(uri, error)
            return False
        elapsed = time.perf_counter() - started
        self.write_durations.append(elapsed)
        self.counters["saves_written"] += 1
        self.counters["saves_failed_in_a_row"] = 0
        self.counters["last_write_s"] = elapsed
        self.counters["last_committed_step"] = step
        if self.rank == 0:
            self.counters["saves_committed"] += 1
            log.info("checkpoint %s committed (%.2fs)", uri, elapsed)
            self._call(self._clean, False)
            self._notify(step, uri)
        return True

    def _rank0_outcome(self, error: BaseException | None) -> BaseException | None:
        """Every rank learns whether rank 0 committed, so counters, `wait()` and `latest()`
        agree everywhere. A collective: every rank finalizes every save, in order."""
        if not self._distributed:
            return error
        box = [error is None]
        dist.broadcast_object_list(box, group=self._writer_group(), group_src=0)
        if error is None and not box[0]:
            return RuntimeError("rank 0 could not write or commit this checkpoint")
        return error

    def _commit(self, step: int, uri: str, write_s: float) -> None:
        if self.before_commit is not None:  # the steps' rows are written first
            self.before_commit(step)
        files = self.storage.files(uri)
        digests = {METADATA: sha256_of(self.storage.fs, join(uri, METADATA))}
        marker = Marker(
            step, self.world_size, files, write_s, time.time(), self.team, self.run, digests
        )
        self.storage.write_marker(uri, sign(marker, self.secret))

    def _failed(self, uri: str, error: BaseException) -> None:
        self.counters["saves_failed"] += 1
        self.counters["saves_failed_in_a_row"] += 1
        self.last_error = str(CheckpointError(uri, f"write failed: {summarize(error)}"))
        log.error("%s; training continues, the previous checkpoint stays valid", self.last_error)
        if self.rank == 0:
            self._call(self.storage.remove, uri)

    def _notify(self, step: int, uri: str) -> None:
        for callback in self.callbacks:
            if self._call(callback.on_checkpoint, step, uri) is not None:
                self.counters["callback_failures"] += 1
                log.warning("checkpoint callback %r failed for %s", callback, uri)

    def _clean(self, startup: bool) -> None:
        steps = self.storage.step_dirs()
        cfg = self.config
        for step in to_delete(steps, cfg.keep_last, cfg.keep_every, startup=startup):
            self.storage.remove(self.storage.uri(step_dir(step)))
