"""The one error type of the checkpoint subsystem: a one-line message naming the checkpoint."""

from __future__ import annotations


class CheckpointError(Exception):
    """A checkpoint cannot be used (corrupt, truncated, uncommitted, incompatible) or written."""

    def __init__(self, uri: str, message: str):
        self.uri = uri
        self.message = " ".join(str(message).split())
        super().__init__(f"checkpoint {uri}: {self.message}")


def summarize(exc: BaseException) -> str:
    """One line for an exception, unwrapping DCP's CheckpointException to its first cause."""
    failures = getattr(exc, "failures", None)
    if isinstance(failures, dict) and failures:
        rank, (inner, _trace) = sorted(failures.items(), key=lambda item: item[0])[0]
        return f"rank {rank}: {summarize(inner)}"
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:400]
