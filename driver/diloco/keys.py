"""CurveZMQ keys of a DiLoCo experiment: one for the synchronizer, one per learner.

    python -m driver.diloco.keys DIR --learners a,b     # generate (local runs and tests)

Layout of DIR (ZeroMQ certificate files: text, Z85 keys, nothing executable):
- `synchronizer.key_secret`: the synchronizer's key pair (only the synchronizer reads it);
- `synchronizer.key`: its public key (every learner reads it);
- `<learner>.key_secret`: a learner's key pair (only that learner reads it);
- `allowed/<learner>.key`: learners' public keys; the synchronizer admits these and
  refuses every other key.

In a cluster the keys come from Kubernetes Secrets as environment variables (the rendered
manifests hold `secretKeyRef`s, never values): `--k8s` also writes one folder per Secret
(`k8s/synchronizer/`, `k8s/<learner>/`) to create them from (docs/diloco.md).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import tempfile
from pathlib import Path

import zmq.auth

from driver.diloco import ENV

SERVER = "synchronizer"
ALLOWED = "allowed"
NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


def generate(folder: str | os.PathLike, learners: list[str]) -> Path:
    """Write the synchronizer's and each learner's key pair (fresh keys; existing kept)."""
    root = Path(folder)
    (root / ALLOWED).mkdir(parents=True, exist_ok=True)
    for name in [SERVER, *learners]:
        if name != SERVER and not NAME.match(name):
            raise ValueError(f"learner name {name!r} is not a DNS-1123 label")
        if (root / f"{name}.key_secret").exists():
            continue
        with tempfile.TemporaryDirectory(dir=root) as tmp:
            public, secret = zmq.auth.create_certificates(tmp, name)
            os.chmod(secret, 0o600)
            shutil.move(secret, root / f"{name}.key_secret")
            if name == SERVER:
                shutil.move(public, root / f"{name}.key")
            else:
                shutil.move(public, root / ALLOWED / f"{name}.key")
    return root


def server_keys(folder: str | os.PathLike) -> tuple[bytes, bytes]:
    """The synchronizer's (public, secret) keys."""
    public, secret = zmq.auth.load_certificate(Path(folder) / f"{SERVER}.key_secret")
    if secret is None:
        raise ValueError(f"{folder}/{SERVER}.key_secret holds no secret key")
    return public, secret


def client_keys(folder: str | os.PathLike, learner: str) -> tuple[bytes, bytes, bytes]:
    """A learner's (public, secret) keys and the synchronizer's public key."""
    public, secret = zmq.auth.load_certificate(Path(folder) / f"{learner}.key_secret")
    if secret is None:
        raise ValueError(f"{folder}/{learner}.key_secret holds no secret key")
    server_public, _ = zmq.auth.load_certificate(Path(folder) / f"{SERVER}.key")
    return public, secret, server_public


def allowed_keys(folder: str | os.PathLike) -> dict[bytes, str]:
    """Z85 public key -> learner name, from `allowed/*.key`."""
    out = {}
    for path in sorted((Path(folder) / ALLOWED).glob("*.key")):
        public, _ = zmq.auth.load_certificate(path)
        out[public] = path.stem
    return out


def from_env(environ: dict) -> tuple[bytes, bytes, dict[bytes, str]]:
    """The synchronizer's keys from `REVE_DILOCO_PUBLIC_KEY`, `REVE_DILOCO_SECRET_KEY` and
    `REVE_DILOCO_ALLOWED` (lines `<learner> <public key>`), as a cluster passes them from
    Secrets: (public, secret, allowed)."""
    public, secret = environ.get(ENV + "PUBLIC_KEY", ""), environ.get(ENV + "SECRET_KEY", "")
    allowed = {}
    for line in environ.get(ENV + "ALLOWED", "").splitlines():
        if line.strip():
            name, key = line.split()
            allowed[key.encode()] = name
    if len(public) != 40 or len(secret) != 40 or not allowed:
        raise ValueError(
            f"{ENV}PUBLIC_KEY, {ENV}SECRET_KEY (40 Z85 characters each) and "
            f"{ENV}ALLOWED (lines: learner key) must be set"
        )
    return public.encode(), secret.encode(), allowed


def write_secret_files(folder: str | os.PathLike, learners: list[str]) -> Path:
    """`<folder>/k8s/<name>/<key>` files, one folder per Kubernetes Secret to create
    (`kubectl create secret generic NAME --from-file=<folder>/k8s/<name>`): the
    synchronizer's `public-key`, `secret-key`, `allowed`; each learner's `public-key`,
    `secret-key`, `server-key`."""
    root = Path(folder)
    server_public, server_secret = server_keys(root)
    allowed = allowed_keys(root)
    files = {
        SERVER: {
            "public-key": server_public,
            "secret-key": server_secret,
            "allowed": "".join(f"{n} {k.decode()}\n" for k, n in allowed.items()).encode(),
        }
    }
    for name in learners:
        public, secret, _ = client_keys(root, name)
        files[name] = {"public-key": public, "secret-key": secret, "server-key": server_public}
    for name, entries in files.items():
        (root / "k8s" / name).mkdir(parents=True, exist_ok=True)
        for key, value in entries.items():
            path = root / "k8s" / name / key
            path.write_bytes(value)
            os.chmod(path, 0o600)
    return root / "k8s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m driver.diloco.keys",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("folder")
    parser.add_argument("--learners", default="", help="comma-separated learner names")
    parser.add_argument("--k8s", action="store_true", help="also write one folder per Secret")
    args = parser.parse_args(argv)
    names = [n for n in args.learners.split(",") if n]
    try:
        root = generate(args.folder, names)
        if args.k8s:
            print(f"Secret folders in {write_secret_files(root, names)}")
    except (OSError, ValueError) as err:
        print(f"error: {args.folder}: {err}")
        return 2
    print(f"keys in {root} (synchronizer + {len(allowed_keys(root))} learners)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
