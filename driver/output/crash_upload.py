"""A crash bundle kept after the run: copied to the run's bucket, signed like a checkpoint.

`upload(folder, root, team, run)` signs the bundle (observability.bundle's MANIFEST.json:
every file's SHA-256, the run's identity, an HMAC with the run's key, the key that signs
its checkpoint commits: catalog.runkey over the team's secret) and copies it to
`<root>/<team>/<run>/<bundle>/` through fsspec (`gs://<bundles bucket>` in a cluster,
`logging.bundle_root`; any fsspec URL or a local folder), the manifest last, so a bundle
with a manifest is whole. The team's prefix is all a run's service account may write there
(infra: the bundles bucket's IAM condition), and the bucket's lifecycle keeps bundles 90
days, long after the RayJob and its pods are gone.

    uri = upload(Path("outputs/research/tiny-lm/crash-20261201-101500"),
                 "gs://reve-ultra-usc1-bundles", "research", "tiny-lm")
"""

from __future__ import annotations

from pathlib import Path

from catalog.runkey import run_key
from observability import bundle


def destination(root: str, team: str, run: str, name: str) -> str:
    """`<root>/<team>/<run>/<bundle name>` (names checked: no separators, no dots only)."""
    from driver.checkpoint.layout import join, run_uri

    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"bundle name must be a plain name, got {name!r}")
    return join(run_uri(root, team, run), name)


def sign(folder: Path, team: str, run: str, secret: bytes) -> dict:
    """Write the bundle's signed MANIFEST.json; returns it."""
    m = bundle.sign(bundle.manifest(folder, team, run), run_key(secret, team, run))
    (folder / bundle.MANIFEST).write_text(bundle.dumps(m))
    return m


def upload(folder: Path, root: str, team: str, run: str, secret: bytes | None = None) -> str:
    """Sign the bundle and copy it to `<root>/<team>/<run>/<bundle>/`; returns the URI.
    `secret`: the team's checkpoint secret (default: driver.checkpoint.auth.load_secret:
    REVE_CHECKPOINT_KEY, else this user's local key)."""
    import fsspec

    from driver.checkpoint.auth import load_secret

    folder = Path(folder)
    sign(folder, team, run, secret if secret is not None else load_secret())
    target = destination(root, team, run, folder.name)
    fs, path = fsspec.core.url_to_fs(target)
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != bundle.MANIFEST)
    for local in [*files, folder / bundle.MANIFEST]:  # the manifest last: whole when present
        remote = f"{path.rstrip('/')}/{local.relative_to(folder).as_posix()}"
        fs.makedirs(remote.rsplit("/", 1)[0], exist_ok=True)
        fs.put_file(str(local), remote)
    return target
