"""`runner catalog`: the clusters and accelerators runs may target.

runner catalog                  # both, as tables
runner catalog clusters -o json
runner catalog accelerators -o yaml
"""

from __future__ import annotations

import json

import click
import yaml

from catalog.loader import accelerators, cluster_names, load_cluster


def cluster_rows() -> list[dict]:
    rows = []
    for name in cluster_names():
        cluster = load_cluster(name)
        pools = [
            f"{p.name}:{p.accelerator}x{p.nodes}{' spot' if p.spot else ''}[{p.resource_group}]"
            for p in cluster.gpu_pools
        ]
        rows.append(
            {
                "name": cluster.name,
                "region": cluster.region,
                "kubernetes": cluster.kubernetes_version,
                "accelerators": cluster.accelerators(),
                "gpu_pools": pools,
                "teams": cluster.teams,
            }
        )
    return rows


def accelerator_rows() -> list[dict]:
    return [
        {
            "name": a.name,
            "machine_type": a.machine_type,
            "gpus_per_node": a.gpus_per_node,
            "gpu_memory_gib": a.gpu_memory_gib,
            "allocatable_cpu": a.allocatable_cpu,
            "allocatable_memory": a.allocatable_memory,
            "transport": a.network.transport,
        }
        for a in accelerators().values()
    ]


def table(rows: list[dict]) -> str:
    """Aligned columns; lists are joined with commas."""
    if not rows:
        return "(none)\n"
    cells = [
        [", ".join(map(str, v)) if isinstance(v, list) else str(v) for v in r.values()]
        for r in rows
    ]
    heads = [h.upper() for h in rows[0]]
    widths = [max(len(x) for x in col) for col in zip(heads, *cells, strict=True)]
    lines = [
        "  ".join(x.ljust(w) for x, w in zip(row, widths, strict=True)).rstrip()
        for row in [heads, *cells]
    ]
    return "\n".join(lines) + "\n"


@click.command()
@click.argument("what", type=click.Choice(["all", "clusters", "accelerators"]), default="all")
@click.option("-o", "--output", type=click.Choice(["table", "yaml", "json"]), default="table")
def catalog(what: str, output: str) -> None:
    """Show the clusters and accelerators runs may target."""
    data = {}
    if what in ("all", "clusters"):
        data["clusters"] = cluster_rows()
    if what in ("all", "accelerators"):
        data["accelerators"] = accelerator_rows()
    if output == "json":
        click.echo(json.dumps(data, indent=2))
    elif output == "yaml":
        click.echo(yaml.safe_dump(data, sort_keys=False), nl=False)
    else:
        for index, (key, rows) in enumerate(data.items()):
            click.echo(("\n" if index else "") + f"{key}:")
            click.echo(table(rows), nl=False)
