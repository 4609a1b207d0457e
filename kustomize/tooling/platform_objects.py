"""Pure builders of the platform's per-cluster documents in the generated Component.

Besides the team and Kueue objects (`kustomize.tooling.objects`, `kustomize.tooling.kueue`),
`overlays/<name>/generated/` holds: the image-cache DaemonSet's pull init containers
(`image_cache_patch`), the images of Warden's node-check and DCGM diag Jobs
(`warden_patch`), the cluster facts pods read (`cluster_info`) and the secret-maker's list
with its RoleBindings (`secret_maker`). `kustomize.tooling.generate` writes what these
functions return.
"""

from __future__ import annotations

import json

from catalog import Cluster
from kustomize.tooling import images, security_objects

WARDEN_IMAGE = "warden"
SECRETS_NS = "platform-secrets"
# Entries of kustomize/images.yaml that Warden's node-check and DCGM diag Jobs run.
WARDEN_JOB_IMAGES = {"WARDEN_CHECK_IMAGE": "preflight", "WARDEN_DIAG_IMAGE": "dcgm-diag"}


class LiteralText(str):
    """A multi-line string `kustomize.tooling.generate.dump` writes as a literal block (`|`)."""


def image_cache_patch(cluster: Cluster, entries: list[dict]) -> list[dict]:
    """JSON patch appending one pull init container per image (after copy-busybox); an
    image not built yet is left out (its pull could only fail, and hold up the others)."""
    pulls = [images.init_container(i) for i in images.cluster_images(cluster, entries)
             if not i.unbuilt]  # fmt: skip
    path = "/spec/template/spec/initContainers/-"
    return [{"op": "add", "path": path, "value": pull} for pull in pulls]


def warden_patch(cluster: Cluster, entries: list[dict]) -> dict:
    """Strategic-merge patch: the images of Warden's Jobs, the ones the GPU nodes cache."""
    env = [{"name": var, "value": images.image_named(cluster, entries, name)}
           for var, name in WARDEN_JOB_IMAGES.items()]  # fmt: skip
    container = {"name": WARDEN_IMAGE, "env": env}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "warden", "namespace": "warden"},
            "spec": {"template": {"spec": {"containers": [container]}}}}  # fmt: skip


def cluster_info(cluster: Cluster, namespace: str) -> dict:
    """Facts pods of the platform read through env (cluster name, project, region)."""
    data = {"cluster": cluster.name, "project": cluster.project, "region": cluster.region}
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cluster-info", "namespace": namespace}, "data": data}  # fmt: skip


def secret_maker(cluster: Cluster) -> list[dict]:
    """The secret-maker's list (a ConfigMap) and its RoleBinding in each namespace it writes."""
    lines = [json.dumps(spec) for spec in security_objects.secret_specs(cluster)]
    specs = LiteralText("[\n" + ",\n".join(lines) + "\n]\n")
    docs: list[dict] = [{"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": "secret-maker-specs", "namespace": SECRETS_NS},
                         "data": {"secrets.json": specs}}]  # fmt: skip
    for namespace in security_objects.secret_namespaces(cluster):
        docs.append({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "secret-maker", "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "secret-maker"},
            "subjects": [{"kind": "ServiceAccount", "name": "secret-maker",
                          "namespace": SECRETS_NS}],
        })  # fmt: skip
    return docs
