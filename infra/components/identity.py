"""The Identity component: Google service accounts with least privilege, Workload Identity.

- nodes: what GKE nodes run as (GKE's minimal node role, pull from the registry).
- training: pods of every team namespace, through Workload Identity: object access to the
  checkpoint and bundle buckets only.
- warden: node repair (a custom role: read, reset and recreate GPU VMs; read GKE nodes).
- observability: read metrics and logs, write metrics.
No account gets a basic role (owner, editor, viewer).
"""

from __future__ import annotations

import pulumi
import pulumi_gcp as gcp

from catalog import Cluster
from infra import derive
from infra.components import TYPE_PREFIX
from infra.components.storage import Storage

NODE_ROLES = ["roles/container.defaultNodeServiceAccount"]
OBSERVABILITY_ROLES = [
    "roles/monitoring.viewer",
    "roles/logging.viewer",
    "roles/monitoring.metricWriter",
]
BUCKET_ROLE = "roles/storage.objectUser"
REGISTRY_READER = "roles/artifactregistry.reader"
WORKLOAD_IDENTITY_USER = "roles/iam.workloadIdentityUser"
WARDEN_PERMISSIONS = [
    "compute.instances.get",
    "compute.instances.list",
    "compute.instances.reset",
    "compute.instanceGroupManagers.get",
    "compute.instanceGroupManagers.update",
    "compute.zoneOperations.get",
    "container.clusters.get",
    "container.nodes.get",
    "container.nodes.list",
    "container.nodes.update",
]


class Identity(pulumi.ComponentResource):
    """Service accounts `nodes`, `training`, `warden`, `observability` and their grants."""

    def __init__(self, spec: Cluster, storage: Storage, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{TYPE_PREFIX}:Identity", spec.name, None, opts)
        self.spec = spec
        self.child = pulumi.ResourceOptions(parent=self)
        self.nodes = self._account("nodes", "GKE nodes")
        self.training = self._account("training", "Training pods (Workload Identity)")
        self.warden = self._account("warden", "Warden node repair")
        self.observability = self._account("observability", "Metrics and logs")
        self._project_roles(self.nodes, "nodes", NODE_ROLES)
        self._project_roles(self.observability, "observability", OBSERVABILITY_ROLES)
        self._registry_reader(storage)
        for label, bucket in (("checkpoints", storage.checkpoints), ("bundles", storage.bundles)):
            gcp.storage.BucketIAMMember(
                f"{spec.name}-training-{label}",
                bucket=bucket.name,
                role=BUCKET_ROLE,
                member=self.member(self.training),
                opts=self.child,
            )
        self._warden_role()
        for team in spec.teams:
            self._bind_ksa(self.training, f"training-{team}", team, derive.TRAINING_KSA)
        self._bind_ksa(self.warden, "warden", *derive.WARDEN_KSA)
        self._bind_ksa(self.observability, "observability", *derive.OBSERVABILITY_KSA)
        self.register_outputs({"emails": self.emails()})

    def emails(self) -> dict[str, pulumi.Output[str]]:
        return {
            "nodes": self.nodes.email,
            "training": self.training.email,
            "warden": self.warden.email,
            "observability": self.observability.email,
        }

    @staticmethod
    def member(account: gcp.serviceaccount.Account) -> pulumi.Output[str]:
        return account.email.apply(lambda email: f"serviceAccount:{email}")

    def _account(self, role: str, what: str) -> gcp.serviceaccount.Account:
        return gcp.serviceaccount.Account(
            f"{self.spec.name}-{role}",
            account_id=f"{self.spec.name}-{role}",
            project=self.spec.project,
            display_name=f"{self.spec.name} {what}",
            opts=self.child,
        )

    def _project_roles(self, account, label: str, roles: list[str]) -> None:
        for role in roles:
            gcp.projects.IAMMember(
                f"{self.spec.name}-{label}-{role.removeprefix('roles/')}",
                project=self.spec.project,
                role=role,
                member=self.member(account),
                opts=self.child,
            )

    def _registry_reader(self, storage: Storage) -> None:
        gcp.artifactregistry.RepositoryIamMember(
            f"{self.spec.name}-nodes-registry-reader",
            project=self.spec.project,
            location=self.spec.registry.location,
            repository=storage.registry.repository_id,
            role=REGISTRY_READER,
            member=self.member(self.nodes),
            opts=self.child,
        )

    def _warden_role(self) -> None:
        role_id = f"wardenNodeRepair_{self.spec.name.replace('-', '_')}"
        role = gcp.projects.IAMCustomRole(
            f"{self.spec.name}-warden-node-repair",
            project=self.spec.project,
            role_id=role_id,
            title=f"Warden node repair ({self.spec.name})",
            permissions=WARDEN_PERMISSIONS,
            opts=self.child,
        )
        gcp.projects.IAMMember(
            f"{self.spec.name}-warden-node-repair",
            project=self.spec.project,
            role=role.role_id.apply(lambda r: f"projects/{self.spec.project}/roles/{r}"),
            member=self.member(self.warden),
            opts=self.child,
        )

    def _bind_ksa(self, account, label: str, namespace: str, ksa: str) -> None:
        """Let one Kubernetes service account act as the Google service account."""
        gcp.serviceaccount.IAMMember(
            f"{self.spec.name}-wi-{label}",
            service_account_id=account.name,
            role=WORKLOAD_IDENTITY_USER,
            member=derive.ksa_member(self.spec, namespace, ksa),
            opts=self.child,
        )
