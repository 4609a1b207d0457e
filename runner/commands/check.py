"""`runner check NODE --cluster C [--image IMAGE]`: the preflight suite as a Job on one node.

The Job (runner.nodecheck.check_job) is pinned to the node with nodeName, tolerates the
GPU, spot and cordon taints, and mounts what the node's accelerator needs. Its image is
`--image`, else the `preflight` entry of `kustomize/images.yaml` in the cluster's registry.
The command waits for the verdict, prints the suite's table and exits 0 (passed), 1
(failed or timed out) or 4 (no such node).

    runner check gke-ultra-usc1-h200-main-5c1a9b2e-x7q2 --cluster ultra-usc1
"""

from __future__ import annotations

import click

from runner.commands._day2 import Day2Command, Failure, client, cluster_spec, kube_errors

POLL_SECONDS = 5.0


@click.command("check", cls=Day2Command)
@click.argument("node")
@click.option("--cluster", required=True, help="Cluster from clusters/.")
@click.option(
    "--image",
    help="Image holding the runner package; default: the `preflight` entry of "
    "kustomize/images.yaml in the cluster's registry.",
)
@click.option(
    "-n", "--namespace", default="warden", show_default=True, help="Namespace of the Job."
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=2100,
    show_default=True,
    help="Seconds to wait for the verdict.",
)
@kube_errors
def check(node: str, cluster: str, image: str | None, namespace: str, timeout: float) -> None:
    """Check one node with the preflight suite and print its verdict."""
    from runner.nodecheck import default_image, job_name, run_node_check

    spec = cluster_spec(cluster)
    image = image or default_image(spec)
    kube = client(cluster)
    click.echo(f"checking {node}: Job {namespace}/{job_name(node)}, image {image}", err=True)
    verdict, lines = run_node_check(kube, spec, node, image, namespace, timeout, POLL_SECONDS)
    for line in lines:
        click.echo(line)
    click.echo(f"node {node}: {verdict}")
    if verdict != "passed":
        raise Failure(f"node {node} check {verdict}")
