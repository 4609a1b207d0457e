"""Image pre-caching for kustomize: init containers that pull the committed image list.

The list itself and its pinning rules live in `catalog.images` (read by runner too).
"""

from __future__ import annotations

from catalog.images import (  # noqa: F401  (re-exported for the generator and tests)
    IMAGES_FILE,
    CachedImage,
    cluster_images,
    digest_problems,
    image_named,
    image_problem,
    load_entries,
)


def registry_url(cluster) -> str:
    """Docker URL of the cluster's Artifact Registry repository (see Cluster.registry_url)."""
    return cluster.registry_url


def init_container(image: CachedImage) -> dict:
    """An init container that only makes the kubelet pull `image`.

    It runs the static busybox the DaemonSet's first init container copied into a shared
    volume, so the image itself needs no shell.
    """
    return {
        "name": f"pull-{image.name}",
        "image": image.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/cache-tools/busybox", "true"],
        "volumeMounts": [{"name": "cache-tools", "mountPath": "/cache-tools"}],
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"},
                      "limits": {"memory": "64Mi"}},
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}},
    }  # fmt: skip
