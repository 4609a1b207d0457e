"""`runner shell`: a shell in a pod of a run, or in a development Job made for you.

    runner shell tiny-lm --rank 2                      # bash in worker rank 2
    runner shell tiny-lm -- nvidia-smi                 # run one command
    runner shell --dev --cluster ultra-usc1 -n research --accelerator H200 --gpus 1

The dev Job (dev-job.yaml.j2) carries run labels, so `runner delete dev-<name>` removes it;
it also ends by itself after `--hours`. Its image is `--image`, else the `trainer` entry of
`kustomize/images.yaml` in the cluster's registry.
"""

from __future__ import annotations

import getpass
import re
import sys
import time

import click

from catalog import labels
from runner.commands._day2 import (
    Day2Command,
    Failure,
    client,
    cluster_option,
    cluster_spec,
    find_run,
    kube_errors,
    namespace_option,
    pick_pod,
)

DEV_IMAGE_ENTRY = "trainer"
DEFAULT_SHELL = ["sh", "-c", "command -v bash >/dev/null && exec bash || exec sh"]
POLL_SECONDS = 2.0


def dev_name(name: str | None) -> str:
    base = name or f"dev-{getpass.getuser()}"
    base = re.sub(r"[^a-z0-9-]", "-", base.lower()).strip("-")[:50]
    return base if base.startswith("dev-") else f"dev-{base}"[:50]


def dev_context(
    name: str,
    namespace: str,
    cluster: str,
    image: str,
    accelerator: str | None,
    gpus: int,
    hours: float,
) -> dict:
    """The values dev-job.yaml.j2 reads, from the cluster and accelerator catalogs."""
    from catalog import accelerator as find_accelerator
    from runner.gpupod import gpu_settings
    from runner.podcontext import pod_context
    from runner.spec_schema import COMMAND_LINE

    spec = cluster_spec(cluster)
    tags = {
        **labels.run_labels(name, namespace, spec.name, "dev"),
        labels.ROLE: "dev",
        labels.KUEUE_QUEUE_LABEL: labels.LOCAL_QUEUE,
    }
    pod = pod_context(
        labels=tags,
        container="dev",
        image=image,
        command=["sleep", "infinity"],
        restart_policy="Never",
        priority_class=labels.PRIORITY_DEFAULT,
        node_selector=labels.cpu_node_labels(),
        resources={"cpu": "4", "memory": "16Gi"},
        shm="2Gi",
    )
    if accelerator:
        acc = find_accelerator(accelerator, source=COMMAND_LINE, field="--accelerator")
        if accelerator not in spec.accelerators():
            raise click.BadParameter(
                f"cluster {cluster} has no {accelerator} pools", param_hint="--accelerator"
            )
        if gpus > acc.gpus_per_node:
            raise click.BadParameter(
                f"{gpus} GPUs exceed the {acc.gpus_per_node} of one {accelerator} node",
                param_hint="--gpus",
            )
        share = gpus / acc.gpus_per_node
        pod["resources"] = {
            "cpu": str(int(acc.allocatable_cpu * share)),
            "memory": f"{int(acc.allocatable_memory_bytes * share) >> 30}Gi",
        }
        pod["shm"] = "16Gi"
        gpu_settings(acc, gpus, namespace=namespace).apply(pod)
    return {
        "name": name,
        "namespace": namespace,
        "labels": tags,
        "deadline_seconds": int(hours * 3600),
        "pod": pod,
    }


class ShellCommand(Day2Command):
    """Everything after `--` is the command, so `runner shell --dev -- nvidia-smi` runs it in
    the default dev Job instead of taking `nvidia-smi` for the Job's name."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            at = args.index("--")
            ctx.meta[AFTER_DASHES] = args[at + 1 :]
            args = args[:at]
        return super().parse_args(ctx, args)


AFTER_DASHES = "runner.shell.command"


def start_dev(kube, ctx: dict, timeout: float) -> str:
    """Apply the dev Job and wait for its pod to run; returns the pod name."""
    from runner.templating import render_template

    for manifest in render_template("dev-job.yaml.j2", dev=ctx):
        kube.apply(manifest)
    deadline = time.monotonic() + timeout
    while True:
        pods = kube.pods_of_run(ctx["namespace"], ctx["name"])
        running = [p for p in pods if p.get("status", {}).get("phase") == "Running"]
        if running:
            return running[0]["metadata"]["name"]
        if time.monotonic() > deadline:
            raise Failure(
                f"dev pod of {ctx['name']} not running after {timeout:.0f}s "
                f"(see `runner describe {ctx['name']}`)"
            )
        time.sleep(POLL_SECONDS)


@click.command("shell", cls=ShellCommand, context_settings={"ignore_unknown_options": True})
@click.argument("run", required=False)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@namespace_option
@cluster_option
@click.option("--pod", help="Pod name.")
@click.option("--rank", type=click.IntRange(min=0), help="Worker rank.")
@click.option("-c", "--container", help="Container (default: the pod's first).")
@click.option("--dev", is_flag=True, help="Start (or reuse) a development Job and enter it.")
@click.option("--image", help="Image of the dev Job; default: `trainer` in kustomize/images.yaml.")
@click.option("--accelerator", help="GPU model of the dev Job (H100, H200); default CPU only.")
@click.option("--gpus", type=click.IntRange(min=1, max=8), default=1, show_default=True)
@click.option("--hours", type=click.FloatRange(min=0.1, max=72), default=8, show_default=True)
@click.option(
    "--wait",
    "wait_s",
    type=float,
    default=600,
    show_default=True,
    help="Seconds to wait for the dev pod.",
)
@kube_errors
def shell(
    run,
    command,
    namespace,
    cluster,
    pod,
    rank,
    container,
    dev,
    image,
    accelerator,
    gpus,
    hours,
    wait_s,
) -> None:
    """Open a shell (or run COMMAND) in a pod of RUN, or in a dev Job with --dev.

    With --dev, RUN names the dev Job (default dev-<you>); COMMAND goes after `--`.
    """
    argv = list(command) + click.get_current_context().meta.get(AFTER_DASHES, [])
    argv = argv or DEFAULT_SHELL
    if dev:
        if not cluster or not namespace:
            raise click.UsageError("--dev needs --cluster and -n/--namespace")
        if not image:
            from runner.nodecheck import default_image

            image = default_image(cluster_spec(cluster), DEV_IMAGE_ENTRY)
        ctx = dev_context(dev_name(run), namespace, cluster, image, accelerator, gpus, hours)
        kube = client(cluster)
        target = start_dev(kube, ctx, wait_s)
        click.echo(
            f"dev pod {target} (ends in {hours:g} h; `runner delete {ctx['name']}`)", err=True
        )
    else:
        if not run:
            raise click.UsageError("give a RUN, or --dev for a development Job")
        kube = client(cluster)
        namespace, _, pods = find_run(kube, namespace, run)
        target = pick_pod(pods, pod, rank, run)["metadata"]["name"]
    code = kube.exec_interactive(namespace, target, argv, container)
    sys.exit(code)
