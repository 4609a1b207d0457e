"""Derive the KubeRay field lists `runner.validate` checks RayJob/RayCluster objects against.

Reads KubeRay's CRD files (`ray-operator/config/crd/bases/ray.io_{rayjobs,rayclusters}.yaml`
of a release), or the schemas the platform vendors from them (`kustomize/schemas/
ray.io_v1_{RayJob,RayCluster}.json`, the KubeRay the platform deploys), and writes
`runner/schemas/kuberay.json`: for each object path the allowed and required keys.

    python -m runner.schemas.derive CRD_DIR v1.6.2
    python -m runner.schemas.derive kustomize/schemas v1.6.2
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


def _schemas(crd_dir: Path) -> tuple[dict, dict]:
    """(RayJob, RayCluster) openAPIV3 schemas from upstream CRDs or the vendored JSON."""
    vendored = crd_dir / "ray.io_v1_RayJob.json"
    if vendored.is_file():
        cluster = json.loads((crd_dir / "ray.io_v1_RayCluster.json").read_text())
        return json.loads(vendored.read_text()), cluster
    return _v1_schema(crd_dir / "ray.io_rayjobs.yaml"), _v1_schema(
        crd_dir / "ray.io_rayclusters.yaml"
    )


def derive(crd_dir: Path, release: str) -> dict:
    """The allowed/required keys per path of RayJob and RayCluster (apiVersion ray.io/v1)."""
    job, cluster = _schemas(crd_dir)
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
