"""Stack settings that are not facts about a cluster (those live in clusters/<name>/).

Read from Pulumi config (`pulumi config set <key> <value>` in infra/); defaults sit in
`infra/Pulumi.yaml`, which the offline plan reads as well.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

PROJECT_FILE = Path(__file__).resolve().parent / "Pulumi.yaml"


@dataclass(frozen=True)
class Settings:
    """Per-stack knobs of the infra program."""

    repo_url: str
    """Git repository ArgoCD syncs (this repository)."""
    revision: str = "main"
    """Branch or tag the root Application tracks."""
    awaiting_delivery: tuple[str, ...] = field(default=())
    """GPU pools whose (future) reservation is not delivered yet: declared with 0 nodes."""
    admin_cidrs: tuple[str, ...] = field(default=())
    """CIDRs allowed to reach the control plane's public endpoint (empty: none besides GCP)."""

    @classmethod
    def from_config(cls) -> Settings:
        """Read the settings from the stack's Pulumi config."""
        import pulumi

        config = pulumi.Config()
        return cls(
            repo_url=config.require("repoUrl"),
            revision=config.get("revision") or "main",
            awaiting_delivery=tuple(config.get_object("awaitingDelivery") or ()),
            admin_cidrs=tuple(config.get_object("adminCidrs") or ()),
        )


def project_name() -> str:
    return yaml.safe_load(PROJECT_FILE.read_text())["name"]


def project_defaults() -> dict[str, str]:
    """`<project>:<key>` -> default value (as Pulumi passes config: strings, JSON for objects)."""
    import json

    data = yaml.safe_load(PROJECT_FILE.read_text())
    out = {}
    for key, spec in (data.get("config") or {}).items():
        if isinstance(spec, dict) and "default" in spec:
            value = spec["default"]
            full = key if ":" in key else f"{data['name']}:{key}"
            out[full] = value if isinstance(value, str) else json.dumps(value)
    return out
