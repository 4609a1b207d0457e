"""Derive the KubeRay field lists `runner.validate` checks RayJob/RayCluster objects against.

Reads KubeRay's CRD files (`ray-operator/config/crd/bases/ray.io_{rayjobs,rayclusters}.yaml`
of a release) and writes `runner/schemas/kuberay.json`: for each object path the allowed and
required keys. Only these small lists are committed, not the upstream CRDs.

    python -m runner.schemas.derive CRD_DIR v1.4.2
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

OUT = Path(__file__).with_name("kuberay.json")


def _v1_schema(path: Path) -> dict:
    crd = yaml.safe_load(path.read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    return version["schema"]["openAPIV3Schema"]


def _fields(node: dict) -> dict:
    return {"allowed": sorted(node["properties"]), "required": sorted(node.get("required", []))}


def derive(crd_dir: Path, release: str) -> dict:
    """The allowed/required keys per path of RayJob and RayCluster (apiVersion ray.io/v1)."""
    job = _v1_schema(crd_dir / "ray.io_rayjobs.yaml")
    cluster = _v1_schema(crd_dir / "ray.io_rayclusters.yaml")
    cluster_spec = cluster["properties"]["spec"]
    head = cluster_spec["properties"]["headGroupSpec"]
    worker = cluster_spec["properties"]["workerGroupSpecs"]["items"]
    return {
        "release": release,
        "source": "ray-operator/config/crd/bases/ray.io_{rayjobs,rayclusters}.yaml",
        "api_version": "ray.io/v1",
        "paths": {
            "RayJob": _fields(job),
            "RayJob.spec": _fields(job["properties"]["spec"]),
            "RayCluster": _fields(cluster),
            "RayCluster.spec": _fields(cluster_spec),
            "headGroupSpec": _fields(head),
            "workerGroupSpecs[]": _fields(worker),
        },
    }


def main(argv: list[str] | None = None) -> None:
    args = argv if argv is not None else sys.argv[1:]
    if len(args) != 2:
        sys.exit("usage: python -m runner.schemas.derive CRD_DIR RELEASE")
    data = derive(Path(args[0]), args[1])
    OUT.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
