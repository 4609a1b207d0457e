"""The signed manifest of a crash bundle: what it holds, that it is whole, who wrote it.

A bundle kept in the run's bucket (`driver.output.crash_upload`) carries `MANIFEST.json`: every
file's SHA-256 and size, the run's identity and an HMAC-SHA256 over all of it with the
run's key (`catalog.runkey.run_key`: the same key that signs the run's checkpoint commits).
A bundle whose manifest does not authenticate, or whose files differ from it, is reported,
never trusted silently (`runner diagnose` says so in its verdict).

    m = sign(manifest(folder, "research", "tiny-lm"), key)     # key: run_key(secret, team, run)
    (folder / MANIFEST).write_text(dumps(m))
    problems = check(folder, key, "research", "tiny-lm")        # [] when whole and authentic
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from pathlib import Path

MANIFEST = "MANIFEST.json"
VERSION = 1


def digest(path: Path, chunk: int = 1 << 20) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            sha.update(block)
    return sha.hexdigest()


def files_of(folder: Path) -> dict[str, dict]:
    """Every file under `folder` but the manifest: relative path -> {sha256, bytes}."""
    out = {}
    for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
        name = path.relative_to(folder).as_posix()
        if name != MANIFEST:
            out[name] = {"sha256": digest(path), "bytes": path.stat().st_size}
    return out


def manifest(folder: Path, team: str, run: str, created: float | None = None) -> dict:
    """The unsigned manifest of a bundle folder."""
    return {
        "version": VERSION,
        "team": team,
        "run": run,
        "bundle": Path(folder).name,
        "created": time.time() if created is None else created,
        "files": files_of(Path(folder)),
    }


def payload(m: dict) -> bytes:
    """The bytes the MAC covers: the manifest without its `mac`, canonical JSON."""
    body = {k: v for k, v in m.items() if k != "mac"}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def sign(m: dict, key: bytes) -> dict:
    return {**m, "mac": hmac.new(key, payload(m), "sha256").hexdigest()}


def dumps(m: dict) -> str:
    return json.dumps(m, indent=1, sort_keys=True) + "\n"


def problem(m: dict, key: bytes, team: str, run: str) -> str | None:
    """Why `m` is not an authentic manifest of `team/run`, or None."""
    if (m.get("team"), m.get("run")) != (team, run):
        owner = f"{m.get('team') or '?'}/{m.get('run') or '?'}"
        return f"its manifest belongs to {owner}, not {team}/{run}"
    mac = m.get("mac")
    expected = hmac.new(key, payload(m), "sha256").hexdigest()
    if not isinstance(mac, str) or not hmac.compare_digest(mac, expected):
        return "its manifest is not signed with this run's key"
    return None


def check(folder: Path, key: bytes | None, team: str, run: str) -> list[str]:
    """Problems of a bundle folder: a missing or unauthentic manifest (not checked without
    a key), files changed, missing or added since it was signed. [] when whole."""
    path = Path(folder) / MANIFEST
    try:
        m = json.loads(path.read_text())
    except (OSError, ValueError):
        return [f"{MANIFEST} missing or unreadable: the bundle is not signed"]
    out = []
    if key is not None and (why := problem(m, key, team, run)):
        out.append(why)
    listed, found = m.get("files") or {}, files_of(Path(folder))
    for name in sorted(set(listed) | set(found)):
        if name not in found:
            out.append(f"{name}: listed in the manifest, missing")
        elif name not in listed:
            out.append(f"{name}: not in the manifest")
        elif found[name]["sha256"] != listed[name].get("sha256"):
            out.append(f"{name}: changed since the bundle was signed")
    return out
