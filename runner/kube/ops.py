"""Operations every adapter shares, built on its primitive calls (list, delete, exec).

A run is found by its identity labels (`catalog.labels.RUN`) on RayJob, RayCluster, Job,
Deployment and Pod objects; copying files uses `tar` over exec, as `kubectl cp` does.
"""

from __future__ import annotations

import io
import shlex
import tarfile
from pathlib import Path, PurePosixPath

from catalog import labels
from runner.kube import KubeError, NotFound, Object

# The objects that make up a run, top-level first; deleting these removes their pods.
RUN_KINDS: list[tuple[str, str]] = [
    ("ray.io/v1", "RayJob"),
    ("ray.io/v1", "RayCluster"),
    ("batch/v1", "Job"),
    ("apps/v1", "Deployment"),
]
# Objects a run may carry beside them, deleted with it when they carry its labels.
SIDE_KINDS: list[tuple[str, str]] = [("v1", "Service"), ("v1", "ConfigMap")]


class RunOps:
    """Mixin: run lookup, deletion and file copy for any class with the primitive calls."""

    def objects_of_run(self, namespace: str | None, run: str) -> list[Object]:
        """The run's top-level objects (RayJob, RayCluster, Job, Deployment)."""
        found: list[Object] = []
        for api_version, kind in RUN_KINDS:
            try:
                found += self.list(api_version, kind, namespace, {labels.RUN: run})
            except NotFound:  # the kind is not installed (e.g. no KubeRay)
                continue
        return found

    def pods_of_run(self, namespace: str | None, run: str) -> list[Object]:
        """The run's pods, sorted by name."""
        pods = self.list("v1", "Pod", namespace, {labels.RUN: run})
        return sorted(pods, key=lambda p: p["metadata"]["name"])

    def delete_run(self, namespace: str | None, run: str) -> list[Object]:
        """Delete every object of the run (pods go with their owners); returns what went."""
        gone: list[Object] = []
        for api_version, kind in RUN_KINDS + SIDE_KINDS:
            try:
                objects = self.list(api_version, kind, namespace, {labels.RUN: run})
            except NotFound:
                continue
            for obj in objects:
                meta = obj["metadata"]
                try:
                    self.delete(api_version, kind, meta.get("namespace"), meta["name"])
                except NotFound:  # already removed by its owner's cascade
                    continue
                gone.append(obj)
        return gone

    def copy_to(
        self, namespace: str, pod: str, local: Path, remote: str, container: str | None = None
    ) -> None:
        """Copy a local file or folder to `remote` (its new path) inside the pod."""
        local = Path(local)
        if not local.exists():
            raise KubeError(f"{local}: no such file or folder")
        target = PurePosixPath(remote)
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            tar.add(str(local), arcname=target.name)
        parent = str(target.parent)
        script = f"mkdir -p {shlex.quote(parent)} && tar xf - -C {shlex.quote(parent)}"
        result = self.exec(namespace, pod, ["sh", "-c", script], container, buffer.getvalue())
        if result.returncode != 0:
            raise KubeError(f"copy to {pod}:{remote} failed: {_last_line(result.stderr)}")

    def copy_from(
        self, namespace: str, pod: str, remote: str, local: Path, container: str | None = None
    ) -> None:
        """Copy a file or folder at `remote` inside the pod to the local path `local`."""
        source = PurePosixPath(remote)
        command = ["tar", "cf", "-", "-C", str(source.parent), source.name]
        result = self.exec(namespace, pod, command, container)
        if result.returncode != 0:
            raise KubeError(f"copy from {pod}:{remote} failed: {_last_line(result.stderr)}")
        extract(result.stdout, source.name, Path(local))


def extract(data: bytes, name: str, local: Path) -> None:
    """Unpack a tar whose top entry is `name` so that entry lands at `local`."""
    local.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        for member in tar.getmembers():
            parts = PurePosixPath(member.name).parts
            if not parts or parts[0] != name:
                continue
            member.name = str(PurePosixPath(local.name, *parts[1:]))
            tar.extract(member, path=str(local.parent), filter="data")


def _last_line(data: bytes) -> str:
    lines = data.decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else "no error output"
