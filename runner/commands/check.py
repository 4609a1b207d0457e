"""`runner check NODE --cluster C --image IMAGE`: the preflight suite as a Job on one node.

The Job (runner.nodecheck.check_job) is pinned to the node with nodeName, tolerates the
GPU, spot and cordon taints, and mounts what the node's accelerator needs. The command
waits for the verdict, prints the suite's table and exits 0 (passed) or 1 (failed).

    runner check gke-ultra-usc1-h200-main-5c1a9b2e-x7q2 --cluster ultra-usc1 --image IMAGE
"""

from __future__ import annotations

import click

from runner.commands._day2 import Failure, client, kube_errors

POLL_SECONDS = 5.0


@click.command("check")
@click.argument("node")
@click.option("--cluster", required=True, help="Cluster from clusters/.")
@click.option(
    "--image", required=True, help="Image holding the runner package (the training image)."
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
def check(node: str, cluster: str, image: str, namespace: str, timeout: float) -> None:
    """Check one node with the preflight suite and print its verdict."""
    from catalog import load_cluster
    from runner.nodecheck import job_name, run_node_check

    spec = load_cluster(cluster, field="--cluster")
    kube = client(cluster)
    click.echo(f"checking {node}: Job {namespace}/{job_name(node)}", err=True)
    verdict, lines = run_node_check(kube, spec, node, image, namespace, timeout, POLL_SECONDS)
    for line in lines:
        click.echo(line)
    click.echo(f"node {node}: {verdict}")
    if verdict != "passed":
        raise Failure(f"node {node} check {verdict}")
