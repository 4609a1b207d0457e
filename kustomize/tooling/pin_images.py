"""Write the digests CI pushed back into the image list and the run definitions.

The images this repository builds (`docker/<name>/Dockerfile`: trainer, preflight) are
pushed by CI to every cluster's registry; the same manifest has the same digest in each.
This command pins that digest everywhere a cluster pulls the image, so the image-cache
DaemonSet and every rendered run use the very same bytes:

    python -m kustomize.tooling.pin_images registries           # one registry URL a line (CI)
    python -m kustomize.tooling.pin_images write \\
        --digest trainer=sha256:<64 hex> --digest preflight=sha256:<64 hex> \\
        [--tag 2026.12.0] [--runs runs/examples]

`write` rewrites the entry's `image:` line in kustomize/images.yaml to
`{registry}/<name>:<tag>@sha256:<digest>` (comments and order kept; an `unbuilt: true` of
the entry goes: the image now exists), and in each run
definition under `--runs` (default runs/examples) every `image:` of `<cluster registry>/<name>`
to the new digest. Then run `python -m kustomize.tooling.generate` and `runner render` (CI
does both). Exit codes: 0 ok, 2 bad input (one line).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from catalog import InputError, cluster_names, load_cluster, repo_root
from catalog.images import IMAGES_FILE, load_entries, repository

DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
REGISTRY = "{registry}"
IMAGE_LINE = re.compile(r"^(\s*(?:-\s*)?image:\s*)(\"?)([^\"\s#]+)(\"?)(.*)$")
NAME_LINE = re.compile(r"^\s*-\s*name:\s*\"?([a-z0-9-]+)\"?\s*$")
UNBUILT_LINE = re.compile(r"^\s+unbuilt:\s*true\s*(#.*)?$")


def registries(root: Path) -> list[str]:
    """Each cluster's Artifact Registry repository URL, sorted, without repeats."""
    return sorted({load_cluster(n, root).registry_url for n in cluster_names(root)})


def parse_digests(items: list[str]) -> dict[str, str]:
    """`name=sha256:...` pairs; each name an entry of the image list built here."""
    out = {}
    for item in items:
        name, _, digest = item.partition("=")
        if not DIGEST.match(digest):
            raise InputError("--digest", name or item, f"{digest!r} is not sha256:<64 hex>")
        out[name] = digest
    return out


def pin_ref(ref: str, digest: str, tag: str | None) -> str:
    """`repo[:tag][@sha256:old]` -> `repo[:tag]@<digest>` (the tag replaced when given)."""
    repo = ref.split("@", 1)[0]
    last = repo.rsplit("/", 1)[-1]
    if ":" in last:
        repo, old_tag = repo.rsplit(":", 1)
        tag = tag or old_tag
    return f"{repo}:{tag}@{digest}" if tag else f"{repo}@{digest}"


def rewrite(text: str, wanted, digest_of) -> tuple[str, int]:
    """Replace each `image:` value for which `wanted(ref)` gives a name; count the changes."""
    lines, changed = [], 0
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\n")
        match = IMAGE_LINE.match(body)
        name = wanted(match.group(3)) if match else None
        if name:
            new = digest_of(name, match.group(3))
            if new != match.group(3):
                body = f"{match.group(1)}{match.group(2)}{new}{match.group(4)}{match.group(5)}"
                changed += 1
        lines.append(body + ("\n" if line.endswith("\n") else ""))
    return "".join(lines), changed


def drop_unbuilt(text: str, names: set[str]) -> tuple[str, int]:
    """The image list without the `unbuilt: true` line of the entries `names`; the count."""
    lines, current, dropped = [], None, 0
    for line in text.splitlines(keepends=True):
        match = NAME_LINE.match(line)
        current = match.group(1) if match else current
        if current in names and UNBUILT_LINE.match(line):
            dropped += 1
            continue
        lines.append(line)
    return "".join(lines), dropped


def write(root: Path, digests: dict[str, str], tag: str | None, runs: Path) -> list[Path]:
    """Pin the image list and the run definitions; the files that changed."""
    entries = {e["name"]: e["image"] for e in load_entries(root)}
    for name in digests:
        if not entries.get(name, "").startswith(REGISTRY + "/"):
            raise InputError("--digest", name, f"no {REGISTRY}/ entry {name!r} in {IMAGES_FILE}")
    images = {entries[n]: n for n in digests}
    changed = []
    path = root / IMAGES_FILE
    text, count = rewrite(path.read_text(), images.get,
                          lambda n, ref: pin_ref(ref, digests[n], tag))  # fmt: skip
    text, dropped = drop_unbuilt(text, set(digests))
    count += dropped
    if count:
        path.write_text(text)
        changed.append(path)
    # The same image in every cluster's registry: <registry url>/<path of the entry>.
    repos = {repository(entries[n].replace(REGISTRY, url)): n
             for url in registries(root) for n in digests}  # fmt: skip
    for run in sorted(runs.rglob("*.yaml")):
        text, count = rewrite(run.read_text(), lambda ref: repos.get(repository(ref)),
                              lambda n, ref: pin_ref(ref, digests[n], None))  # fmt: skip
        if count:
            run.write_text(text)
            changed.append(run)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("registries", help="print each cluster's registry URL")
    put = sub.add_parser("write", help="pin pushed digests")
    put.add_argument("--digest", action="append", required=True, help="NAME=sha256:<hex>")
    put.add_argument("--tag", help="the release tag pushed with the digest")
    put.add_argument("--runs", type=Path, default=Path("runs/examples"))
    args = parser.parse_args(argv)
    root = repo_root()
    try:
        if args.command == "registries":
            print("\n".join(registries(root)))
            return 0
        runs = args.runs if args.runs.is_absolute() else root / args.runs
        for path in write(root, parse_digests(args.digest), args.tag, runs):
            print(f"pinned {path.relative_to(root)}")
    except InputError as err:
        print(f"error: {err.line()}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
