"""The Storage component: checkpoint and run-bundle buckets and the training image registry.

Buckets sit in the cluster's region with uniform bucket-level access and public access
prevention enforced; lifecycle rules age checkpoints to colder storage and delete old
bundles. The Artifact Registry Docker repository keeps tags immutable and cleans up
untagged images.
"""

from __future__ import annotations

import pulumi
import pulumi_gcp as gcp

from catalog import Cluster
from infra.components import TYPE_PREFIX

DAY_S = 86400
# Checkpoints: colder after 30 days, deleted after a year. Bundles: deleted after 90 days.
CHECKPOINT_RULES = [
    {"action": {"type": "SetStorageClass", "storage_class": "NEARLINE"}, "condition": {"age": 30}},
    {"action": {"type": "Delete"}, "condition": {"age": 365}},
    {"action": {"type": "AbortIncompleteMultipartUpload"}, "condition": {"age": 1}},
]
BUNDLE_RULES = [
    {"action": {"type": "Delete"}, "condition": {"age": 90}},
    {"action": {"type": "AbortIncompleteMultipartUpload"}, "condition": {"age": 1}},
]
UNTAGGED_MAX_AGE = f"{30 * DAY_S}s"


class Storage(pulumi.ComponentResource):
    """`checkpoints`, `bundles` (buckets) and `registry` (Artifact Registry repository)."""

    def __init__(self, spec: Cluster, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{TYPE_PREFIX}:Storage", spec.name, None, opts)
        self.spec = spec
        self.checkpoints = self._bucket(spec.buckets.checkpoints, CHECKPOINT_RULES)
        self.bundles = self._bucket(spec.buckets.bundles, BUNDLE_RULES)
        self.registry = gcp.artifactregistry.Repository(
            f"{spec.name}-{spec.registry.repository}",
            project=spec.project,
            location=spec.registry.location,
            repository_id=spec.registry.repository,
            format="DOCKER",
            description=f"Training images for {spec.name}",
            docker_config={"immutable_tags": True},
            cleanup_policies=[
                {
                    "id": "delete-untagged",
                    "action": "DELETE",
                    "condition": {"tag_state": "UNTAGGED", "older_than": UNTAGGED_MAX_AGE},
                }
            ],
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({"checkpoints": self.checkpoints.name, "bundles": self.bundles.name})

    def _bucket(self, name: str, rules: list[dict]) -> gcp.storage.Bucket:
        return gcp.storage.Bucket(
            name,
            name=name,
            project=self.spec.project,
            location=self.spec.region.upper(),
            storage_class="STANDARD",
            uniform_bucket_level_access=True,
            public_access_prevention="enforced",
            lifecycle_rules=rules,
            force_destroy=False,
            opts=pulumi.ResourceOptions(parent=self, protect=True),
        )
