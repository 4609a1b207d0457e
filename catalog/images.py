"""The one committed image list (`kustomize/images.yaml`) and the rules every image obeys.

`cluster_images(cluster, load_entries(root))` expands the list for one cluster (plus its
accelerators' sidecar images); `image_named(...)` picks one entry (`trainer`, `preflight`,
...); `image_problem(ref)` says why a reference is not pinned; `unbuilt_entry(...)` names
the entry a run's image belongs to while that image is not built yet. Read by kustomize's
generator, runner (node checks, dev shells, renders) and Warden.

The images built here (`{registry}/<name>`, docker/<name>/Dockerfile) are pinned by the
digest the images workflow pushed (`.github/workflows/images.yaml`, which writes it with
`python -m kustomize.tooling.pin_images`). Until that workflow has pushed a build, the entry
says `unbuilt: true` and names the release tag the build will carry, without a digest: no
GPU node pre-pulls it, and `runner render`/`submit`/`validate` say on one line that a
cluster run using it cannot start yet.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from catalog.errors import InputError
from catalog.loader import accelerator, read_yaml
from catalog.schema import Cluster

IMAGES_FILE = "kustomize/images.yaml"
REGISTRY = "{registry}"  # an entry's placeholder for the cluster's Artifact Registry
DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,40}[a-z0-9])?$")
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
# A release tag starts with a dotted version: v1.6.2, 16.4, 2.60.0-py311-gpu, 2026.11.0.
RELEASE_TAG = re.compile(r"^v?\d+\.\d+")
# A tag that names a moving target rather than a release.
MUTABLE_TAGS = {"latest", "stable", "main", "master", "dev", "edge", "nightly", "head"}


@dataclass(frozen=True)
class CachedImage:
    """One image pre-pulled on GPU nodes."""

    name: str
    """Suffix of the init container that pulls it (pull-<name>)."""
    image: str
    """The full, pinned reference."""
    unbuilt: bool = False
    """Built here, not pushed yet: the reference names the tag the build will carry."""


def image_problem(ref: str) -> str | None:
    """Why `ref` is not pinned (None when it is): a digest, or a release tag, never latest."""
    if DIGEST.search(ref):
        return None
    last = ref.rsplit("/", 1)[-1]
    if ":" not in last:
        return "has no tag or digest"
    tag = last.split(":", 1)[1]
    if tag.lower() in MUTABLE_TAGS or not RELEASE_TAG.match(tag):
        return f"tag {tag!r} is not a release version"
    return None


def digest_of(ref: str) -> str | None:
    """The `sha256:<hex>` a reference is pinned to, or None."""
    match = DIGEST.search(ref)
    return match.group(0)[1:] if match else None


def repository(ref: str) -> str:
    """`host/path/name[:tag][@sha256:...]` -> `host/path/name`."""
    repo = ref.split("@", 1)[0]
    head, _, last = repo.rpartition("/")
    return f"{head}/{last.split(':', 1)[0]}" if head else last.split(":", 1)[0]


def digest_problems(cluster: Cluster, entries: list[dict], refs: list[str]) -> list[str]:
    """Images used by runs that the cluster caches: both must name the same digest.

    A run's image from the image list (same repository in the cluster's registry) is pulled
    from the node's cache only when both references carry the same digest."""
    cached = {repository(i.image): i for i in cluster_images(cluster, entries) if not i.unbuilt}
    found = []
    for ref in refs:
        image = cached.get(repository(ref))
        if image is None:  # not cached (or not built yet: render says so)
            continue
        want = digest_of(image.image)
        if ref == image.image:
            continue
        if want is None:
            found.append(f"{IMAGES_FILE}: {image.name}: {image.image!r} is not pinned by "
                         f"digest, but runs use it ({ref})")  # fmt: skip
        elif digest_of(ref) != want:
            found.append(f"{ref} differs from the cached {image.name} image ({want}); "
                         "run python -m kustomize.tooling.pin_images")  # fmt: skip
    return found


def load_entries(root: Path) -> list[dict]:
    """The entries of the image list, checked field by field."""
    data = read_yaml(root / IMAGES_FILE, IMAGES_FILE)
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        raise InputError(IMAGES_FILE, "images", "must be a list")
    seen = set()
    for i, entry in enumerate(data["images"]):
        field = f"images[{i}]"
        if not isinstance(entry, dict) or set(entry) - {"name", "image", "clusters", "unbuilt"}:
            raise InputError(IMAGES_FILE, field, "expected keys name, image, clusters, unbuilt")
        name, image = entry.get("name"), entry.get("image")
        if not isinstance(name, str) or not DNS_LABEL.match(name) or name in seen:
            raise InputError(IMAGES_FILE, f"{field}.name", f"{name!r} is not a unique DNS label")
        seen.add(name)
        if not isinstance(image, str):
            raise InputError(IMAGES_FILE, f"{field}.image", "required string")
        problem = image_problem(image) or built_here_problem(image, entry.get("unbuilt", False))
        if problem:
            raise InputError(IMAGES_FILE, f"{field}.image", f"{image!r} {problem}")
    return data["images"]


def built_here_problem(image: str, unbuilt) -> str | None:
    """Why an entry's pinning does not fit whether it is built here and pushed: an image
    built here is pinned by digest once pushed, and has none while `unbuilt`."""
    if not isinstance(unbuilt, bool):
        return "has an unbuilt: that is not true or false"
    here = image.startswith(REGISTRY + "/")
    if unbuilt and (not here or digest_of(image)):
        return "is marked unbuilt: only an image built here, without a digest, can be"
    if here and not unbuilt and not digest_of(image):
        return (
            "is built here but not pinned by digest: pin what the images workflow "
            "pushed (python -m kustomize.tooling.pin_images), or mark it unbuilt: true"
        )
    return None


def cluster_images(cluster: Cluster, entries: list[dict]) -> list[CachedImage]:
    """The images to cache on one cluster's GPU nodes, in list order, sidecars last."""
    out = []
    for entry in entries:
        if cluster.name in entry.get("clusters", [cluster.name]):
            ref = entry["image"].replace(REGISTRY, cluster.registry_url)
            out.append(CachedImage(entry["name"], ref, entry.get("unbuilt", False)))
    for key in cluster.accelerators():
        for sidecar in accelerator(key).sidecars:
            if all(c.image != sidecar.image for c in out):
                out.append(CachedImage(sidecar.name, sidecar.image))
    return out


def unbuilt_entry(cluster: Cluster, entries: list[dict], ref: str) -> str | None:
    """The name of the entry not built yet that `ref` (a reference without a digest) is an
    image of, in `cluster`'s registry; None for any other reference."""
    if digest_of(ref):
        return None
    for image in cluster_images(cluster, entries):
        if image.unbuilt and repository(image.image) == repository(ref):
            return image.name
    return None


def image_named(cluster: Cluster, entries: list[dict], name: str) -> str:
    """The cluster's reference of the list entry `name` (InputError when it is missing)."""
    for image in cluster_images(cluster, entries):
        if image.name == name:
            return image.image
    raise InputError(IMAGES_FILE, "images", f"no {name!r} entry for cluster {cluster.name}")
