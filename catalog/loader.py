"""Read the accelerator catalog and the cluster catalog from disk.

`load_cluster("ultra-usc1")` reads `clusters/ultra-usc1/cluster.yaml` from the repository
root (the nearest folder above the working directory that holds `clusters/`, or
`$PLATFORM_ROOT`). Errors are `InputError`s naming the file and the field.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Hashable
from importlib import resources
from pathlib import Path

import yaml
from pydantic import ValidationError

from catalog.errors import InputError, from_validation
from catalog.schema import Accelerator, Cluster

ACCELERATORS_FILE = "catalog/accelerators.yaml"


def repo_root(start: Path | None = None) -> Path:
    """The repository root: `$PLATFORM_ROOT`, else the nearest parent holding `clusters/`."""
    env = os.environ.get("PLATFORM_ROOT")
    if env:
        return Path(env).resolve()
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "clusters").is_dir():
            return folder
    return Path(__file__).resolve().parent.parent


class _UniqueKeys(yaml.SafeLoader):
    """The safe loader, refusing a key given twice in one mapping (which would silently
    drop the first value)."""

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if not isinstance(key, Hashable):
                continue  # the safe loader refuses it, with its own message
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (lines {seen[key]} and {line})",
                    key_node.start_mark)  # fmt: skip
            seen[key] = line
        return super().construct_mapping(node, deep)


def read_yaml(path: Path, source: str | None = None) -> object:
    """Parse a YAML file; a missing file or a syntax error is an InputError."""
    name = source or str(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise InputError(name, None, "file not found") from None
    except OSError as err:
        raise InputError(name, None, f"cannot read: {err.strerror}") from None
    try:
        return yaml.load(text, Loader=_UniqueKeys)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark else ""
        problem = getattr(err, "problem", None) or "invalid YAML"
        raise InputError(name, None, f"{where}{problem}") from None


@functools.cache
def accelerators() -> dict[str, Accelerator]:
    """Every accelerator in the catalog, by key (H100, H200)."""
    text = resources.files("catalog").joinpath("accelerators.yaml").read_text()
    data = yaml.safe_load(text)
    catalog = {}
    for key, entry in data.items():
        try:
            catalog[key] = Accelerator.model_validate({"name": key, **entry})
        except ValidationError as err:
            raise from_validation(ACCELERATORS_FILE, err, prefix=key) from None
    return catalog


def sidecar_host_writes() -> dict[tuple[str, str], str]:
    """(sidecar, host path) -> why it mounts that host path writable, over the catalog; every
    other host mount of a run pod is read-only (runner renders it, kustomize checks it)."""
    return {
        (sidecar.name, mount.host_path): mount.writable
        for accel in accelerators().values()
        for sidecar in accel.sidecars
        for mount in sidecar.mounts
        if mount.writable
    }


def accelerator(key: str, source: str | None = None, field: str = "accelerator") -> Accelerator:
    """One accelerator by key; an unknown key names the known ones."""
    catalog = accelerators()
    if key not in catalog:
        known = ", ".join(sorted(catalog))
        raise InputError(source, field, f"unknown accelerator {key!r} (known: {known})")
    return catalog[key]


def cluster_names(root: Path | None = None) -> list[str]:
    base = (root or repo_root()) / "clusters"
    return sorted(p.parent.name for p in base.glob("*/cluster.yaml"))


def cluster_file(name: str, root: Path | None = None) -> Path:
    return (root or repo_root()) / "clusters" / name / "cluster.yaml"


def load_cluster_file(path: Path, source: str | None = None) -> Cluster:
    """Parse and check one cluster file, including accelerators against the catalog."""
    name = source or str(path)
    data = read_yaml(path, name)
    if not isinstance(data, dict):
        raise InputError(name, None, "expected a mapping at the top level")
    try:
        cluster = Cluster.model_validate(data)
    except ValidationError as err:
        raise from_validation(name, err) from None
    if cluster.name != path.parent.name:
        raise InputError(name, "name", f"{cluster.name!r} must equal its folder name")
    for i, pool in enumerate(cluster.gpu_pools):
        accelerator(pool.accelerator, name, f"gpu_pools[{i}].accelerator")
    check_version_floor(cluster, name)
    return cluster


def check_version_floor(cluster: Cluster, source: str) -> None:
    """Refuse a cluster whose GKE version is below the floor of one of its accelerators."""
    for key in cluster.accelerators():
        floor = accelerator(key).gke_version_floor
        problem = floor and floor.problem(cluster.kubernetes_version, cluster.gke_version)
        if problem:
            field = "gke_version" if cluster.gke_version else "kubernetes_version"
            raise InputError(source, field, f"{problem}, the floor for {key} ({floor.source})")


@functools.cache
def _load_cluster_cached(path: Path, mtime: float) -> Cluster:
    return load_cluster_file(path, _relative(path))


def load_cluster(
    name: str, root: Path | None = None, source: str | None = None, field: str = "cluster"
) -> Cluster:
    """A cluster by name; an unknown name is an InputError naming the known clusters."""
    path = cluster_file(name, root)
    if not path.is_file():
        known = ", ".join(cluster_names(root)) or "none"
        raise InputError(source, field, f"unknown cluster {name!r} (known: {known})")
    return _load_cluster_cached(path, path.stat().st_mtime)


def _relative(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def load_peer_pod_ranges(cluster: Cluster) -> dict[str, str]:
    """Pod ranges of the clusters whose learners may dial this cluster's synchronizers
    (`cross_region.peers`, each from its own catalog file); {} when none."""
    if cluster.cross_region is None:
        return {}
    source = f"clusters/{cluster.name}/cluster.yaml"
    return {
        peer: load_cluster(peer, source=source, field=f"cross_region.peers[{i}]").network.pods_cidr
        for i, peer in enumerate(cluster.cross_region.peers)
    }
