"""`runner port-forward RUN [[LOCAL:]REMOTE ...]`: forward local ports to a run's pod.

The default forwards the Ray dashboard (8265) of the head pod; stop with Ctrl-C.

    runner port-forward tiny-lm                 # http://127.0.0.1:8265
    runner port-forward tiny-lm 18265:8265 --rank 0
"""

from __future__ import annotations

import time

import click

from runner.commands._day2 import (
    Day2Command,
    client,
    cluster_option,
    find_run,
    kube_errors,
    namespace_option,
    pick_pod,
    run_argument,
)

RAY_DASHBOARD = 8265


def parse_port(text: str) -> tuple[int, int]:
    """`8265` -> (8265, 8265); `18265:8265` -> (18265, 8265); `:8265` -> (0, 8265)."""
    local, _, remote = text.rpartition(":")
    try:
        pair = (int(local) if local else (0 if ":" in text else int(remote)), int(remote))
    except ValueError:
        raise click.BadParameter(f"{text!r} is not PORT or LOCAL:REMOTE") from None
    if not all(0 <= p <= 65535 for p in pair) or pair[1] == 0:
        raise click.BadParameter(f"{text!r}: ports are 1-65535")
    return pair


def wait() -> None:
    """Block until Ctrl-C."""
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass


@click.command("port-forward", cls=Day2Command)
@run_argument
@click.argument("ports", nargs=-1)
@namespace_option
@cluster_option
@click.option("--pod", help="Pod name (default: the head pod).")
@click.option("--rank", type=click.IntRange(min=0), help="Worker rank instead of the head.")
@click.option("--address", default="127.0.0.1", show_default=True, help="Local address.")
@kube_errors
def port_forward(run, ports, namespace, cluster, pod, rank, address) -> None:
    """Forward local ports to a pod of a run (default: Ray dashboard on the head)."""
    from runner.kube.forward import Forwarder

    pairs = [parse_port(p) for p in ports] or [(RAY_DASHBOARD, RAY_DASHBOARD)]
    kube = client(cluster)
    namespace, _, pods = find_run(kube, namespace, run)
    target = pick_pod(pods, pod, rank, run)["metadata"]["name"]
    forwarders = []
    try:
        for local, remote in pairs:
            fwd = Forwarder(kube, namespace, target, remote, local, address)
            forwarders.append(fwd)
            click.echo(f"Forwarding from {address}:{fwd.local_port} -> {target}:{remote}")
        wait()
    except OSError as err:
        raise click.ClickException(f"cannot listen on {address}: {err.strerror}") from None
    finally:
        for fwd in forwarders:
            fwd.close()
