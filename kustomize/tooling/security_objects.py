"""Pure builders of the platform's security objects: the runs' Argo CD project and the Secrets.

- `runs_project(cluster)`: the Argo CD project of the `runs` Application: only the kinds
  `runner render` writes (RUN_KINDS), only into the cluster's team namespaces, no
  cluster-scoped kind at all; `project_admits` decides, as Argo CD does, whether a project
  lets an object through.
- `secret_specs(cluster)`: the random Secrets the `secret-maker` Job creates when missing
  (kustomize/bases/platform-secrets/make_secrets.py): per team the checkpoint key and the
  Ray token, and the platform's own passwords; `secret_namespaces` lists where it writes.

`kustomize.tooling.generate` writes what they return; `kustomize.tooling.security` checks
the built manifests against them.
"""

from __future__ import annotations

import fnmatch

from catalog import Cluster
from catalog import labels as names

Obj = dict
OWN_REPO = "https://github.com/reve-platform/platform.git"
ARGOCD_NAMESPACE = "argocd"
RUNS_PROJECT = "runs"
# (group, kind) of every object runner's templates write (runner/templates/*.j2);
# tests/kustomize/test_security.py reads the templates and fails when they differ.
RUN_KINDS = [
    ("", "ConfigMap"),
    ("", "Service"),
    ("apps", "Deployment"),
    ("batch", "Job"),
    ("ray.io", "RayCluster"),
    ("ray.io", "RayJob"),
]
# Secrets runs reference (secretKeyRef): name -> key.
CHECKPOINT_KEY = names.CHECKPOINT_KEY_SECRET
RAY_TOKEN = names.RAY_TOKEN_SECRET


def runs_project(cluster: Cluster) -> Obj:
    """AppProject `runs`: RUN_KINDS into the team namespaces of `cluster`, nothing else."""
    destinations = [{"server": "https://kubernetes.default.svc", "namespace": team}
                    for team in cluster.teams]  # fmt: skip
    kinds = [{"group": group, "kind": kind} for group, kind in RUN_KINDS]
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "AppProject",
        "metadata": {"name": RUNS_PROJECT, "namespace": ARGOCD_NAMESPACE,
                     "annotations": {"argocd.argoproj.io/sync-wave": "-10"}},
        "spec": {
            "description": f"Runs of {cluster.name}: what `runner render` writes to apps/",
            "sourceRepos": [OWN_REPO],
            "destinations": destinations,
            "clusterResourceWhitelist": [],
            "namespaceResourceWhitelist": kinds,
        },
    }  # fmt: skip


def project_admits(project: Obj, obj: Obj) -> bool:
    """Would Argo CD let an Application of `project` apply `obj`? (its project checks)

    As Argo CD decides (`AppProject.IsGroupKindPermitted`, `IsDestinationPermitted`): a
    cluster-scoped kind (an object without a namespace) must be on
    `clusterResourceWhitelist`, so none is allowed when it is empty; a namespaced kind must
    be on `namespaceResourceWhitelist` when that list is not empty, and on no blacklist; the
    namespace must match a destination (globs allowed).
    """
    spec = project.get("spec", {})
    group = obj.get("apiVersion", "").rpartition("/")[0]
    kind = obj.get("kind", "")
    namespace = obj.get("metadata", {}).get("namespace")

    def listed(key: str) -> bool:
        return any(fnmatch.fnmatchcase(group, e.get("group", "")) and
                   fnmatch.fnmatchcase(kind, e.get("kind", ""))
                   for e in spec.get(key) or [])  # fmt: skip

    if not namespace:
        return listed("clusterResourceWhitelist") and not listed("clusterResourceBlacklist")
    whitelist = spec.get("namespaceResourceWhitelist") or []
    if (whitelist and not listed("namespaceResourceWhitelist")) or listed(
        "namespaceResourceBlacklist"
    ):
        return False
    return any(fnmatch.fnmatchcase(namespace, d.get("namespace") or "")
               for d in spec.get("destinations") or [])  # fmt: skip


def secret_specs(cluster: Cluster) -> list[Obj]:
    """Secrets the secret-maker Job makes when missing: random hex values, never in git.

    `copy_to`: namespaces that get the same values (a service and its clients)."""
    teams = list(cluster.teams)
    specs = [
        {"namespace": t, "name": name, "keys": [key]}
        for t in teams for name, key in (CHECKPOINT_KEY, RAY_TOKEN)
    ]  # fmt: skip
    specs += [
        {"namespace": "observability", "name": "clickhouse-writer", "keys": ["password"],
         "copy_to": ["warden"]},
        {"namespace": "observability", "name": "clickhouse-reader", "keys": ["password"],
         "copy_to": ["warden", *teams]},  # Warden's straggler sweep reads
        {"namespace": "observability", "name": "clickhouse-runs", "keys": ["password"],
         "copy_to": teams},
        {"namespace": "observability", "name": "grafana-admin", "keys": ["password"]},
        {"namespace": "warden", "name": "temporal-db", "keys": ["password"]},
    ]  # fmt: skip
    return specs


def secret_namespaces(cluster: Cluster) -> list[str]:
    """Every namespace the secret-maker writes to (it gets a RoleBinding in each)."""
    out: dict[str, None] = {}
    for spec in secret_specs(cluster):
        for ns in [spec["namespace"], *spec.get("copy_to", [])]:
            out.setdefault(ns, None)
    return list(out)
