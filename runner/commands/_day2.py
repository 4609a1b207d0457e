"""What the day-2 commands share: the cluster client, kubectl-like flags (`-n`, `--cluster`,
`-o table|yaml|json`), run and pod lookup, one-line errors. How runs are shown is in
`runner.commands._day2_views`.

Every command gets its client from `client()`, which calls `runner.kube.connect`; tests
monkeypatch `runner.kube.connect` to return a FakeKube. Bad arguments exit 2, a missing run
exits 4 (NOT_FOUND), an API failure exits 1, each with one line on stderr.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from catalog import exitcodes, labels


class Failure(click.ClickException):
    """The cluster refused or failed: one line, exit 1."""

    exit_code = exitcodes.FAILURE

    def show(self, file=None) -> None:
        from runner.cli import one_line

        click.echo(one_line(f"error: {self.format_message()}"), err=True)


class NotFoundError(Failure):
    """The run, pod or node does not exist: exit 4."""

    exit_code = exitcodes.NOT_FOUND


class Day2Command(click.Command):
    """A day-2 command. A usage error it raises while running gets its context, so the
    one-line error of `runner.cli.main` names the command (`see runner logs --help`)."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except click.UsageError as err:
            if err.ctx is None:
                err.ctx, err.cmd = ctx, ctx.command
            raise


def cluster_spec(name: str):
    """The catalog's cluster named by `--cluster`; unknown: `command line: --cluster: …`."""
    from catalog import load_cluster
    from runner.spec_schema import COMMAND_LINE

    return load_cluster(name, source=COMMAND_LINE, field="--cluster")


def client(cluster: str | None):
    """The Kubernetes adapter for `--cluster` (or the current kubeconfig context)."""
    from runner import kube

    try:
        return kube.connect(cluster=cluster)
    except kube.KubeError as err:
        raise Failure(str(err)) from None


def kube_errors(fn: Callable) -> Callable:
    """Turn adapter errors raised inside a command into one-line exits (4 for NotFound)."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from runner.kube import KubeError, NotFound

        try:
            return fn(*args, **kwargs)
        except NotFound as err:
            raise NotFoundError(str(err)) from None
        except KubeError as err:
            raise Failure(str(err)) from None

    return wrapper


def _complete_runs(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    """Shell completion of run names from the cluster (nothing when it cannot be reached)."""
    try:
        kube = client(ctx.params.get("cluster"))
        names = {
            o["metadata"].get("labels", {}).get(labels.RUN, "")
            for o in kube.list(
                "v1",
                "Pod",
                ctx.params.get("namespace"),
                {labels.MANAGED_BY: labels.MANAGED_BY_VALUE},
            )
        }
    except Exception:  # noqa: BLE001 - completion must never fail loudly
        return []
    return sorted(n for n in names if n.startswith(incomplete))


run_argument = click.argument("run", shell_complete=_complete_runs)
namespace_option = click.option(
    "-n", "--namespace", default=None, help="Namespace (team) of the run; default: search all."
)
cluster_option = click.option(
    "--cluster", default=None, help="Cluster from clusters/ (its kubeconfig context)."
)
output_option = click.option(
    "-o",
    "--output",
    "output",
    type=click.Choice(["table", "yaml", "json"]),
    default="table",
    show_default=True,
    help="Output format.",
)


def find_run(kube, namespace: str | None, run: str) -> tuple[str, list[dict], list[dict]]:
    """(namespace, top-level objects, pods) of a run; exit 4 when it does not exist."""
    objects = kube.objects_of_run(namespace, run)
    pods = kube.pods_of_run(namespace, run)
    found = objects or pods
    if not found:
        where = f"namespace {namespace}" if namespace else "any namespace"
        raise NotFoundError(f"run {run!r} not found in {where}")
    spaces = sorted({o["metadata"].get("namespace", "") for o in found})
    if len(spaces) > 1:
        raise click.UsageError(
            f"run {run!r} exists in namespaces {', '.join(spaces)}; pick one with -n"
        )
    return spaces[0], objects, pods


def pick_pod(pods: list[dict], pod: str | None, rank: int | None, run: str) -> dict:
    """The pod named, the pod of a rank, else the run's head (or first) pod."""
    if pod is not None:
        for item in pods:
            if item["metadata"]["name"] == pod:
                return item
        raise NotFoundError(f"pod {pod!r} is not part of run {run!r}")
    if rank is not None:
        workers = ranked(pods)
        if not 0 <= rank < len(workers):
            raise NotFoundError(f"run {run!r} has no rank {rank} ({len(workers)} worker pods)")
        return workers[rank]
    heads = [p for p in pods if role(p) == "head"]
    if heads:
        return heads[0]
    if not pods:
        raise NotFoundError(f"run {run!r} has no pods")
    return ranked(pods)[0] if ranked(pods) else pods[0]


COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


def role(pod: dict) -> str:
    return pod["metadata"].get("labels", {}).get(labels.ROLE, "")


def ranked(pods: list[dict]) -> list[dict]:
    """Worker pods in rank order: the Job completion index, else by name."""
    workers = [p for p in pods if role(p) in ("worker", "job")]

    def key(p: dict) -> tuple[int, str]:
        index = p["metadata"].get("labels", {}).get(COMPLETION_INDEX)
        return (int(index) if index and index.isdigit() else 1 << 30, p["metadata"]["name"])

    return sorted(workers, key=key)
