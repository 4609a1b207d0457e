"""The Identity component: Google service accounts with least privilege, Workload Identity.

- nodes: what GKE nodes run as (GKE's minimal node role, pull from the registry).
- team-<team>: one per team, bound through Workload Identity to the KSA `training` of that
  team's namespace only: object access to the team's own prefix (`<team>/`) of the
  checkpoint and bundle buckets, by IAM conditions. No account holds a whole bucket, so one
  team cannot read, plant or delete another team's checkpoints.
- warden: node repair: reading and listing VMs and GKE nodes, and (only on this cluster's
  node VMs and instance groups, by an IAM condition on their names) reset and update.
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
# Warden's permissions on the cluster's own node VMs and instance groups, granted with a
# condition on their names (infra.derive.warden_instance_condition).
WARDEN_NODE_PERMISSIONS = [
    "compute.instances.get",
    "compute.instances.reset",
    "compute.instanceGroupManagers.get",
    "compute.instanceGroupManagers.update",
]
# Permissions whose resource is the project, a zone or the GKE cluster (no VM name to
# condition on): listing, operation polling and GKE node reads.
WARDEN_PROJECT_PERMISSIONS = [
    "compute.instances.list",
    "compute.zoneOperations.get",
    "container.clusters.get",
    "container.nodes.get",
    "container.nodes.list",
    "container.nodes.update",
]
WARDEN_PERMISSIONS = WARDEN_NODE_PERMISSIONS + WARDEN_PROJECT_PERMISSIONS


class Identity(pulumi.ComponentResource):
    """Service accounts `nodes`, `team-<team>` (one per team), `warden`, `observability`."""

    def __init__(self, spec: Cluster, storage: Storage, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{TYPE_PREFIX}:Identity", spec.name, None, opts)
        self.spec = spec
        self._storage = storage
        self.child = pulumi.ResourceOptions(parent=self)
        self.nodes = self._account("nodes", "GKE nodes")
        self.teams = {
            team: self._account(f"team-{team}", f"runs of team {team} (Workload Identity)")
            for team in spec.teams
        }
        self.warden = self._account("warden", "Warden node repair")
        self.observability = self._account("observability", "Metrics and logs")
        self._project_roles(self.nodes, "nodes", NODE_ROLES)
        self._project_roles(self.observability, "observability", OBSERVABILITY_ROLES)
        self._registry_reader(storage)
        for team, account in self.teams.items():
            self._team_buckets(team, account)
            self._bind_ksa(account, f"team-{team}", team, derive.TRAINING_KSA)
        self._warden_roles()
        self._bind_ksa(self.warden, "warden", *derive.WARDEN_KSA)
        self._bind_ksa(self.observability, "observability", *derive.OBSERVABILITY_KSA)
        self.register_outputs({"emails": self.emails()})

    def emails(self) -> dict[str, pulumi.Output[str]]:
        emails = {"nodes": self.nodes.email}
        emails |= {f"team-{team}": account.email for team, account in self.teams.items()}
        return emails | {"warden": self.warden.email, "observability": self.observability.email}

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

    def _team_buckets(self, team: str, account) -> None:
        """Object access to the team's prefix of both buckets, nothing else."""
        for label, name in (("checkpoints", self.spec.buckets.checkpoints),
                            ("bundles", self.spec.buckets.bundles)):  # fmt: skip
            bucket = getattr(self._storage, label)
            gcp.storage.BucketIAMMember(
                f"{self.spec.name}-team-{team}-{label}",
                bucket=bucket.name,
                role=BUCKET_ROLE,
                member=self.member(account),
                condition=derive.team_bucket_condition(name, team),
                opts=self.child,
            )

    def _warden_roles(self) -> None:
        """Two custom roles: node VMs (conditioned on their names) and project-wide reads."""
        cluster = self.spec.name
        for label, permissions, condition in (
            ("node-repair", WARDEN_NODE_PERMISSIONS, derive.warden_instance_condition(self.spec)),
            ("node-read", WARDEN_PROJECT_PERMISSIONS, None),
        ):
            suffix = "".join(w.title() for w in label.split("-"))
            role = gcp.projects.IAMCustomRole(
                f"{cluster}-warden-{label}",
                project=self.spec.project,
                role_id=f"warden{suffix}_{cluster.replace('-', '_')}",
                title=f"Warden {label.replace('-', ' ')} ({cluster})",
                permissions=permissions,
                opts=self.child,
            )
            gcp.projects.IAMMember(
                f"{cluster}-warden-{label}",
                project=self.spec.project,
                role=role.role_id.apply(lambda r: f"projects/{self.spec.project}/roles/{r}"),
                member=self.member(self.warden),
                condition=condition,
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
