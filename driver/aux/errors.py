"""Typed errors of the auxiliary-service transport: every call returns a reply or raises one.

Each error has a stable `code` that travels on the wire in error replies, so a caller can
tell a deadline from a full queue, a dead service, a handler's exception or a bad message:

    try:
        reply = client.call("encode", {"text": "..."})
    except AuxTimeout: ...          # code "timeout"
    except AuxError as err: log(err.code, err)
"""

from __future__ import annotations


class AuxError(RuntimeError):
    """Base of the transport's errors; `code` is stable and machine-readable."""

    code = "error"

    def __init__(self, message: str = "", *, service: str = ""):
        self.service = service
        super().__init__(f"{service}: {message}" if service else message)


class AuxTimeout(AuxError):
    """The request's deadline passed before a reply came back."""

    code = "timeout"


class AuxQueueFull(AuxError):
    """Fail-fast policy and the caller's per-rank queue at the worker is full."""

    code = "queue_full"


class AuxUnavailable(AuxError):
    """No live proxy or worker could take the request (or it died while holding it)."""

    code = "unavailable"


class AuxRemoteError(AuxError):
    """The service's handler raised; the message reads "<Type>: <text>"."""

    code = "remote"


class AuxProtocolError(AuxError):
    """A malformed, truncated or oversized message (refused by the receiver)."""

    code = "protocol"


class AuxCancelled(AuxError):
    """The caller cancelled the request."""

    code = "cancelled"


ERRORS: dict[str, type[AuxError]] = {
    cls.code: cls
    for cls in (AuxTimeout, AuxQueueFull, AuxUnavailable, AuxRemoteError, AuxProtocolError)
}
ERRORS[AuxCancelled.code] = AuxCancelled


def from_code(code: str, message: str, service: str = "") -> AuxError:
    """The typed error for a wire error code (unknown codes give a plain AuxError)."""
    cls = ERRORS.get(code, AuxError)
    err = cls(message, service=service)
    if cls is AuxError:
        err.code = code if isinstance(code, str) and code.isidentifier() else "error"
    return err
