"""Write the per-cluster YAML that follows from the catalogs; `--check` fails if it is stale.

    python -m kustomize.tooling.generate            rewrite kustomize/overlays/*/generated/ ...
    python -m kustomize.tooling.generate --check    exit 1 and name the stale files

For each cluster in `clusters/` it writes `kustomize/overlays/<name>/generated/` (a kustomize
Component: team namespaces, Kueue flavors and queue, the image-cache pulls, cluster facts,
the images of Warden's Jobs), `kustomize/overlays/<name>-fair-sharing/` (the optional
capacity-quota overlay), `kustomize/overlays/<name>-node-addons/` (the GPU node add-ons
its accelerators need, from `kustomize/bases/node-addons/`) and
`kustomize/argocd/<name>/runs-project.yaml` (the Argo CD project of its runs: only the kinds
`runner render` writes, only into its team namespaces). Once for all clusters it copies the
platform's ClickHouse schema (`observability/sql/schema.sql`, which the trainer image ships)
into the ClickHouse base (`kustomize/bases/observability/clickhouse/schema.sql`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from catalog import Cluster, InputError, accelerator, cluster_names, load_cluster, repo_root
from catalog import labels as names
from kustomize.tooling import images, kueue, objects, platform_objects, security_objects

KUSTOMIZE_API = "kustomize.config.k8s.io/v1beta1"
KUSTOMIZE_COMPONENT_API = "kustomize.config.k8s.io/v1alpha1"
RUNS_PROJECT_FILE = "runs-project.yaml"
FAIR_SHARING_SUFFIX = "-fair-sharing"
NODE_ADDONS_SUFFIX = "-node-addons"
NODE_ADDONS_BASES = Path("kustomize/bases/node-addons")
IMAGE_CACHE_TARGET = {"kind": "DaemonSet", "namespace": "image-cache", "name": "image-cache"}


def header(cluster: Cluster) -> str:
    sources = f"clusters/{cluster.name}/cluster.yaml, catalog/ and {images.IMAGES_FILE}"
    return (
        f"# Generated from {sources}\n"
        "# by `python -m kustomize.tooling.generate`. Do not edit: change the sources and rerun.\n"
    )


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(
    platform_objects.LiteralText,
    lambda d, s: d.represent_scalar("tag:yaml.org,2002:str", s, style="|"),
)


def dump(docs: list) -> str:
    return "---\n".join(yaml.dump(d, Dumper=_Dumper, sort_keys=False, width=100) for d in docs)


def component_files(cluster: Cluster, entries: list[dict]) -> dict[str, str]:
    """`overlays/<name>/generated/`: a Component the cluster's overlay includes."""
    head = header(cluster)
    teams = [o for t in cluster.teams for o in objects.team_objects(cluster, t)]
    kueue_objs = [*kueue.resource_flavors(cluster), kueue.admit_all_queue(cluster)]
    info = [platform_objects.cluster_info(cluster, ns) for ns in ("warden", "observability")]
    kustomization = {
        "apiVersion": KUSTOMIZE_COMPONENT_API,
        "kind": "Component",
        "resources": ["teams.yaml", "kueue.yaml", "cluster-info.yaml", "secret-maker.yaml"],
        "patches": [
            {"path": "image-cache.yaml", "target": IMAGE_CACHE_TARGET},
            {"path": "service-accounts.yaml"},
            {"path": "warden.yaml"},
        ],
        "labels": [{"pairs": {names.CLUSTER: cluster.name}, "includeSelectors": False}],
        "images": [{"name": platform_objects.WARDEN_IMAGE,
                    "newName": f"{images.registry_url(cluster)}/{platform_objects.WARDEN_IMAGE}"}],
    }  # fmt: skip
    return {
        "kustomization.yaml": head + dump([kustomization]),
        "teams.yaml": head + dump(teams),
        "kueue.yaml": head + dump(kueue_objs),
        "cluster-info.yaml": head + dump(info),
        "secret-maker.yaml": head + dump(platform_objects.secret_maker(cluster)),
        "image-cache.yaml": head + dump([platform_objects.image_cache_patch(cluster, entries)]),
        "service-accounts.yaml": head + dump(objects.service_account_patches(cluster)),
        "warden.yaml": head + dump([platform_objects.warden_patch(cluster, entries)]),
    }


def fair_sharing_files(cluster: Cluster) -> dict[str, str]:
    """`overlays/<name>-fair-sharing/`: the cluster's overlay with per-team capacity quotas."""
    head = header(cluster)
    delete_shared = {"apiVersion": kueue.KUEUE_API, "kind": "ClusterQueue",
                     "metadata": {"name": kueue.CLUSTER_QUEUE}, "$patch": "delete"}  # fmt: skip
    patches = [{"patch": yaml.safe_dump(delete_shared, sort_keys=False)}]
    for team in cluster.teams:
        repoint = [{"op": "replace", "path": "/spec/clusterQueue",
                    "value": kueue.team_queue(team)}]  # fmt: skip
        target = {"kind": "LocalQueue", "namespace": team, "name": names.LOCAL_QUEUE}
        patches.append({"target": target, "patch": yaml.safe_dump(repoint, sort_keys=False)})
    kustomization = {
        "apiVersion": KUSTOMIZE_API,
        "kind": "Kustomization",
        "resources": [f"../{cluster.name}", "queues.yaml"],
        "patches": patches,
    }
    return {
        "kustomization.yaml": head + dump([kustomization]),
        "queues.yaml": head + dump(kueue.fair_share_queues(cluster)),
    }


def node_addons(cluster: Cluster, root: Path) -> list[str]:
    """The node add-ons the cluster's accelerators need, in catalog order, without repeats."""
    wanted = []
    for key in cluster.accelerators():
        for i, name in enumerate(accelerator(key).node_addons):
            if not (root / NODE_ADDONS_BASES / name / "kustomization.yaml").is_file():
                raise InputError("catalog/accelerators.yaml", f"{key}.node_addons[{i}]",
                                 f"no add-on {name!r} in {NODE_ADDONS_BASES}/")  # fmt: skip
            if name not in wanted:
                wanted.append(name)
    return wanted


def node_addons_files(cluster: Cluster, root: Path) -> dict[str, str]:
    """`overlays/<name>-node-addons/`: what the `node-addons` Application syncs (wave -3)."""
    kustomization = {
        "apiVersion": KUSTOMIZE_API,
        "kind": "Kustomization",
        "resources": [f"../../bases/node-addons/{n}" for n in node_addons(cluster, root)],
        "labels": [{"pairs": {names.CLUSTER: cluster.name}, "includeSelectors": False}],
    }
    return {"kustomization.yaml": header(cluster) + dump([kustomization])}


CLICKHOUSE_SCHEMA = Path("kustomize/bases/observability/clickhouse/schema.sql")


def schema_copy() -> str:
    """The ClickHouse base's copy of the platform schema, with a header naming its source."""
    from observability import clickhouse

    return (
        "-- Generated from observability/sql/schema.sql by\n"
        "-- `python -m kustomize.tooling.generate`. Do not edit: change the source and rerun.\n"
        + clickhouse.SCHEMA.read_text()
    )


def expected_files(root: Path) -> dict[Path, str]:
    """Every generated file and its content, by path."""
    entries = images.load_entries(root)
    out: dict[Path, str] = {root / CLICKHOUSE_SCHEMA: schema_copy()}
    for name in cluster_names(root):
        cluster = load_cluster(name)
        overlay = root / "kustomize" / "overlays" / name
        for rel, text in component_files(cluster, entries).items():
            out[overlay / "generated" / rel] = text
        for rel, text in fair_sharing_files(cluster).items():
            out[overlay.parent / f"{name}{FAIR_SHARING_SUFFIX}" / rel] = text
        for rel, text in node_addons_files(cluster, root).items():
            out[overlay.parent / f"{name}{NODE_ADDONS_SUFFIX}" / rel] = text
        argocd = root / "kustomize" / "argocd" / name / RUNS_PROJECT_FILE
        out[argocd] = header(cluster) + dump([security_objects.runs_project(cluster)])
    return out


def stale_files(root: Path) -> list[Path]:
    """Generated files whose content differs from what the sources produce."""
    stale = []
    for path, text in expected_files(root).items():
        if not path.is_file() or path.read_text() != text:
            stale.append(path)
    return stale


def write_files(root: Path) -> list[Path]:
    written = []
    for path, text in expected_files(root).items():
        if not path.is_file() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if a file is stale")
    args = parser.parse_args(argv)
    root = repo_root()
    try:
        paths = stale_files(root) if args.check else write_files(root)
    except InputError as err:
        print(f"error: {err.line()}", file=sys.stderr)
        return 2
    for path in paths:
        rel = path.relative_to(root)
        print(f"stale: {rel}" if args.check else f"wrote {rel}")
    if args.check and paths:
        print("run: python -m kustomize.tooling.generate", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
