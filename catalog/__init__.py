"""The catalogs every part reads: accelerators (GPU models) and clusters.

    from catalog import load_cluster, accelerator
    cluster = load_cluster("ultra-usc1")
    h200 = accelerator("H200")

Names other than `InputError` load on first use, so importing `catalog` (as the CLI does at
start-up) does not build the pydantic schemas.
"""

from __future__ import annotations

import importlib

from catalog.errors import InputError

_LAZY = {
    "accelerator": "catalog.loader",
    "accelerators": "catalog.loader",
    "cluster_names": "catalog.loader",
    "load_cluster": "catalog.loader",
    "load_cluster_file": "catalog.loader",
    "load_peer_pod_ranges": "catalog.loader",
    "repo_root": "catalog.loader",
    "sidecar_host_writes": "catalog.loader",
    "Accelerator": "catalog.schema",
    "Cluster": "catalog.schema",
    "GpuPool": "catalog.schema",
}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'catalog' has no attribute {name!r}")


__all__ = ["InputError", *_LAZY]
