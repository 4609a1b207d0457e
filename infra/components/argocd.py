"""The ArgoCD component: the Argo CD Helm chart (exact version) and the root Application.

The root Application syncs `kustomize/argocd/<cluster>` from this repository (app-of-apps):
everything else that runs in the cluster is committed there, not declared here.
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from catalog import Cluster
from catalog import labels as names
from infra import derive
from infra.components import TYPE_PREFIX
from infra.settings import Settings

CHART = "argo-cd"
CHART_VERSION = "10.1.1"  # Argo CD v3.4.4
CHART_REPO = "https://argoproj.github.io/argo-helm"
NAMESPACE = "argocd"
IN_CLUSTER = "https://kubernetes.default.svc"


# Argo CD 2.x+ no longer reports an Application's health to its parent; without this check
# the app-of-apps would not wait between sync waves (CRDs and operators before their users).
APPLICATION_HEALTH = """hs = {}
hs.status = "Progressing"
hs.message = ""
if obj.status ~= nil and obj.status.health ~= nil then
  hs.status = obj.status.health.status
  if obj.status.health.message ~= nil then hs.message = obj.status.health.message end
end
return hs
"""


def chart_values() -> dict:
    """Argo CD on the CPU pool; CRDs kept if the release is ever removed."""
    return {
        "crds": {"install": True, "keep": True},
        "global": {"nodeSelector": names.cpu_node_labels()},
        "dex": {"enabled": False},
        "configs": {
            "cm": {
                "kustomize.buildOptions": "--enable-helm",
                "resource.customizations.health.argoproj.io_Application": APPLICATION_HEALTH,
            }
        },
    }


def root_application(spec: Cluster, settings: Settings) -> dict:
    """The app-of-apps Application for this cluster."""
    return {
        "project": "default",
        "source": {
            "repoURL": settings.repo_url,
            "targetRevision": settings.revision,
            "path": derive.argocd_path(spec),
        },
        "destination": {"server": IN_CLUSTER, "namespace": NAMESPACE},
        "syncPolicy": {
            "automated": {"prune": True, "selfHeal": True},
            "syncOptions": ["CreateNamespace=true", "ServerSideApply=true"],
        },
    }


class ArgoCD(pulumi.ComponentResource):
    """Installs Argo CD into the cluster and hands it the cluster's folder."""

    def __init__(
        self,
        spec: Cluster,
        provider: k8s.Provider,
        settings: Settings,
        depends_on: list[pulumi.Resource],
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__(f"{TYPE_PREFIX}:ArgoCD", spec.name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=provider)
        self.release = k8s.helm.v3.Release(
            f"{spec.name}-argocd",
            name="argocd",
            chart=CHART,
            version=CHART_VERSION,
            repository_opts={"repo": CHART_REPO},
            namespace=NAMESPACE,
            create_namespace=True,
            atomic=True,
            values=chart_values(),
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=depends_on)),
        )
        self.root = k8s.apiextensions.CustomResource(
            f"{spec.name}-root-app",
            api_version="argoproj.io/v1alpha1",
            kind="Application",
            metadata={"name": f"{spec.name}-root", "namespace": NAMESPACE},
            spec=root_application(spec, settings),
            opts=pulumi.ResourceOptions.merge(
                child, pulumi.ResourceOptions(depends_on=[self.release])
            ),
        )
        self.register_outputs({"chart_version": CHART_VERSION})
