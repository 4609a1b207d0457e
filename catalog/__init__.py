"""The catalogs every part reads: accelerators (GPU models) and clusters.

from catalog import load_cluster, accelerator
cluster = load_cluster("ultra-usc1")
h200 = accelerator("H200")
"""

from catalog.errors import InputError
from catalog.loader import (
    accelerator,
    accelerators,
    cluster_names,
    load_cluster,
    load_cluster_file,
    repo_root,
)
from catalog.schema import Accelerator, Cluster, GpuPool

__all__ = [
    "Accelerator",
    "Cluster",
    "GpuPool",
    "InputError",
    "accelerator",
    "accelerators",
    "cluster_names",
    "load_cluster",
    "load_cluster_file",
    "repo_root",
]
