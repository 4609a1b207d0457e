"""Authenticated checkpoints: only a checkpoint this run's team committed is ever loaded.

DCP's `.metadata` file is a pickle, so loading a planted checkpoint could run code. Every
commit marker therefore carries the run's identity, the SHA-256 of `.metadata` and an
HMAC-SHA256 over all of it, keyed per run: `run_key = HMAC(secret, team/run)`. The secret
comes from `REVE_CHECKPOINT_KEY` (in a cluster: the team's Secret, rendered as a reference,
never a value); a local run without it uses a key file made once for this user
(`~/.config/reve/checkpoint.key`, mode 0600). A step whose marker does not authenticate is
never resumed from, never counted by retention and never deleted: it is reported.

    secret = load_secret()                      # bytes
    marker = sign(marker, secret)               # at commit
    problem = marker_problem(marker, secret, team, run)   # None when authentic
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import os
import secrets
from pathlib import Path

from catalog.labels import CHECKPOINT_KEY_ENV
from catalog.runkey import run_key
from driver.checkpoint.layout import Marker

KEY_ENV = CHECKPOINT_KEY_ENV
"""Environment variable holding the team's checkpoint secret (from a Kubernetes Secret)."""


class MissingKey(RuntimeError):
    """A cluster run without its checkpoint secret."""


def local_key_file() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(Path.home(), ".config")
    return Path(base) / "reve" / "checkpoint.key"


def load_secret(required: bool = False) -> bytes:
    """The checkpoint secret: `REVE_CHECKPOINT_KEY`, else (unless `required`) this user's
    local key file, made on first use."""
    value = os.environ.get(KEY_ENV, "")
    if value:
        return value.encode()
    if required:
        raise MissingKey(
            f"{KEY_ENV} is not set: a cluster run needs its team's checkpoint key "
            "(the Secret the rendered manifest references)"
        )
    return _local_secret(local_key_file())


def _local_secret(path: Path) -> bytes:
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_hex(32))
        try:  # the first writer wins; a concurrent one reads the winner's key
            os.link(tmp, path)
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)
    return path.read_text().strip().encode()


def _mac(marker: Marker, secret: bytes) -> str:
    payload = marker.dumps(with_mac=False).encode()
    return hmac.new(run_key(secret, marker.team, marker.run), payload, "sha256").hexdigest()


def sign(marker: Marker, secret: bytes) -> Marker:
    return dataclasses.replace(marker, mac=_mac(marker, secret))


def marker_problem(marker: Marker, secret: bytes, team: str, run: str) -> str | None:
    """Why `marker` is not an authentic marker of `team/run`, or None."""
    if (marker.team, marker.run) != (team, run):
        return f"its marker belongs to {marker.team or '?'}/{marker.run or '?'}, not {team}/{run}"
    if not marker.mac or not hmac.compare_digest(marker.mac, _mac(marker, secret)):
        return "its commit marker is not signed with this run's checkpoint key"
    return None


def sha256_of(fs, path: str, chunk: int = 1 << 20) -> str:
    """SHA-256 of one file through an fsspec filesystem, read in pieces."""
    digest = hashlib.sha256()
    with fs.open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def identity(uri: str) -> tuple[str, str]:
    """`<root>/<team>/<run>/step-<n>` -> (team, run)."""
    parts = uri.rstrip("/").split("/")
    return (parts[-3], parts[-2]) if len(parts) >= 3 else ("", "")
