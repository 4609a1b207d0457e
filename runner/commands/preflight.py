"""`runner preflight RUN`: check every pod of a placed run; `--local` checks this machine.

Prints the table (pod, node, check, result, detail) and exits 1 on any FAIL. On a failure
it names the failing nodes and offers to tear the run down (`--yes`/`--no` answer for
scripts). `conclude()` does that reporting for other commands (`runner submit --apply`).

    runner preflight tiny-lm -n research
    runner preflight tiny-lm --wait 900         # first wait up to 15 min for placement
    runner preflight tiny-lm --no               # report only, never tear down
    runner preflight --local                    # CPU path here, 2-process gloo all-reduce
"""

from __future__ import annotations

import json

import click

from runner.commands._day2 import (
    Day2Command,
    Failure,
    client,
    cluster_option,
    find_run,
    kube_errors,
    namespace_option,
)


def show(rows, output: str) -> None:
    """Print rows as a table with a summary line, or as JSON/YAML."""
    from runner.preflight.rows import summary, table

    data = [json.loads(r.to_json()) for r in rows]
    if output == "json":
        click.echo(json.dumps(data, indent=2))
    elif output == "yaml":
        import yaml

        click.echo(yaml.safe_dump(data, sort_keys=False).rstrip())
    else:
        click.echo(table(rows))
        click.echo(summary(rows))


def local(output: str, skip: set[str]) -> list:
    from runner.preflight.suite import SuiteOptions, local_rendezvous, run_suite

    rows = run_suite(SuiteOptions(rendezvous=local_rendezvous(2), skip=skip))
    show(rows, output)
    return rows


def offer_teardown(
    kube, namespace: str, run: str, objects: list[dict], answer: bool | None
) -> None:
    """Ask (unless --yes/--no answered) and delete the run's RayCluster/RayJob/Job."""
    names = ", ".join(f"{o['kind']}/{o['metadata']['name']}" for o in objects)
    if not names:
        return
    if answer is None:
        try:
            answer = click.confirm(f"Tear down {names} so its GPUs are freed?", default=False)
        except click.Abort:  # no terminal and no answer: keep it
            answer = False
    if not answer:
        click.echo(f"kept {names}", err=True)
        return
    for obj in kube.delete_run(namespace, run):
        click.echo(f"deleted {obj['kind']}/{obj['metadata']['name']}", err=True)


def conclude(kube, namespace: str, run: str, rows, teardown: bool | None, output="table") -> bool:
    """Print the rows; on a FAIL name the failing nodes and offer the teardown.

    `teardown`: True tears down, False keeps, None asks on the terminal (no answer keeps).
    Returns True when no check failed.
    """
    from runner.preflight.rows import failed, failing_nodes

    show(rows, output)
    if not failed(rows):
        return True
    nodes = failing_nodes(rows)
    click.echo(f"failing node(s): {', '.join(nodes) or 'none named'}", err=True)
    offer_teardown(kube, namespace, run, kube.objects_of_run(namespace, run), teardown)
    return False


def skip_groups(skip: str) -> set[str]:
    from runner.preflight.suite import GROUPS

    groups = {s for s in skip.split(",") if s}
    if unknown := sorted(groups - set(GROUPS)):
        raise click.BadParameter(f"unknown group(s) {unknown}", param_hint="'--skip'")
    return groups


@click.command("preflight", cls=Day2Command)
@click.argument("run", required=False)
@namespace_option
@cluster_option
@click.option("--local", "is_local", is_flag=True, help="Check this machine (CPU path).")
@click.option(
    "--yes/--no",
    "teardown",
    default=None,
    help="On failure, tear the run down (--yes) or keep it (--no) without asking.",
)
@click.option(
    "-o",
    "--output",
    type=click.Choice(["table", "yaml", "json"]),
    default="table",
    show_default=True,
    help="Output format.",
)
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(min=0),
    default=0,
    show_default=True,
    help="Seconds to wait for the run's pods to be placed and Running.",
)
@click.option(
    "--port",
    type=click.IntRange(1024, 65535),
    default=29533,
    show_default=True,
    help="Rendezvous port on the first pod.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=10),
    default=900,
    show_default=True,
    help="Seconds the suite may take in each pod.",
)
@click.option(
    "--skip",
    default="",
    help="Comma-separated check groups to skip: kernel,nvidia-smi,host,matmul,allreduce.",
)
@kube_errors
@click.pass_context
def preflight(
    ctx, run, namespace, cluster, is_local, teardown, output, wait_s, port, timeout, skip
):
    """Check the machines of a placed run (or this machine with --local)."""
    from runner.preflight.rows import failed

    if is_local == bool(run):
        raise click.UsageError("give a RUN, or --local (not both)")
    groups = skip_groups(skip)
    if is_local:
        if failed(local(output, groups)):
            ctx.exit(1)
        return
    from runner.preflight.remote import preflight_run

    kube = client(cluster)
    namespace, _, _ = find_run(kube, namespace, run)
    rows = preflight_run(
        kube, namespace, run, placement_timeout=wait_s, timeout=timeout, port=port, skip=skip
    )
    if not conclude(kube, namespace, run, rows, teardown, output):
        raise Failure(f"preflight of {run} failed")
