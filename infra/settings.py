"""Stack settings that are not facts about a cluster (those live in clusters/<name>/).

Read from Pulumi config (`pulumi config set <key> <value>` in infra/, or `--set key=value`
for the offline plan); defaults sit in `infra/Pulumi.yaml`, which the offline plan reads as
well. A bad value is one `catalog.InputError` naming the key and where it was set.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from catalog import InputError

PROJECT_FILE = Path(__file__).resolve().parent / "Pulumi.yaml"
KEYS = ("repoUrl", "revision", "awaitingDelivery", "adminCidrs")


@dataclass(frozen=True)
class Settings:
    """Per-stack knobs of the infra program."""

    repo_url: str
    """Git repository ArgoCD syncs (this repository)."""
    revision: str = "main"
    """Branch or tag the root Application tracks."""
    awaiting_delivery: tuple[str, ...] = field(default=())
    """GPU pools whose reservation is not fulfilled yet: declared with 0 nodes (a future
    reservation says so in the cluster file instead: `future.delivered`)."""
    admin_cidrs: tuple[str, ...] = field(default=())
    """CIDRs allowed to reach the control plane's public endpoint (empty: none besides GCP)."""
    source: str = "stack config"
    """Where these settings were set, for error messages (a stack file, or --set)."""

    @classmethod
    def from_config(cls, source: str) -> Settings:
        """Read and check the settings from the stack's Pulumi config."""
        import pulumi
        from pulumi.runtime.config import CONFIG

        config = pulumi.Config()
        for full in CONFIG.get():
            project, _, key = full.partition(":")
            if project == config.name and key not in KEYS:
                raise InputError(source, key, f"unknown setting (known: {', '.join(KEYS)})")
        repo_url = config.get("repoUrl") or ""
        if not repo_url.strip():
            raise InputError(source, "repoUrl", "required: the Git repository ArgoCD syncs")
        cidrs = _strings(config.get("adminCidrs"), "adminCidrs", source)
        for cidr in cidrs:
            try:
                ipaddress.ip_network(cidr)
            except ValueError:
                raise InputError(source, "adminCidrs", f"{cidr!r} is not a CIDR") from None
        return cls(
            repo_url=repo_url,
            revision=config.get("revision") or "main",
            awaiting_delivery=_strings(config.get("awaitingDelivery"), "awaitingDelivery", source),
            admin_cidrs=cidrs,
            source=source,
        )


def _strings(raw: str | None, key: str, source: str) -> tuple[str, ...]:
    """A JSON list of strings (how Pulumi passes a list), or an InputError."""
    if not raw:
        return ()
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(source, key, f"expected a JSON list of strings, got {raw!r}")
    return tuple(value)


def stack_file(stack: str) -> str:
    """The stack's config file, as a user would name it."""
    return f"infra/Pulumi.{stack}.yaml"


def project_name() -> str:
    return yaml.safe_load(PROJECT_FILE.read_text())["name"]


def project_defaults() -> dict[str, str]:
    """`<project>:<key>` -> default value (as Pulumi passes config: strings, JSON for objects)."""
    data = yaml.safe_load(PROJECT_FILE.read_text())
    out = {}
    for key, spec in (data.get("config") or {}).items():
        if isinstance(spec, dict) and "default" in spec:
            value = spec["default"]
            full = key if ":" in key else f"{data['name']}:{key}"
            out[full] = value if isinstance(value, str) else json.dumps(value)
    return out
