"""`runner ui`: the workload dashboard in a browser (docs/ui.md).

runner ui                                   # local: runs under ./outputs, http://127.0.0.1:<port>/
runner ui --outputs /data/outputs --run research/tiny-lm --port 8080
CLICKHOUSE_PASSWORD=... runner ui --clickhouse http://localhost:8123 --cluster ultra-usc1
"""

from __future__ import annotations

from pathlib import Path

import click

from catalog.errors import InputError
from runner.commands._store_flags import credential_options
from runner.commands._types import PathArg


def parse_run(text: str | None) -> tuple[str, str] | None:
    if text is None:
        return None
    from runner.ui.server import NAME

    team, _, name = text.partition("/")
    if not (NAME.match(team) and NAME.match(name)):
        raise InputError("command line", "--run", f"TEAM/NAME, not {text!r}")
    return team, name


def cluster_source(url: str, cluster: str | None, namespace: str | None, user_env: str,
                   password_env: str):  # fmt: skip
    from observability.store import ServerStore, StoreError
    from runner import kube
    from runner.ui.sources import ClusterSource

    try:
        store = ServerStore(url, user_env=user_env, password_env=password_env)
    except StoreError as err:
        raise InputError("command line", "--clickhouse", str(err).split(": ", 1)[-1]) from None
    try:
        client = kube.connect(cluster=cluster)
    except kube.KubeError as err:
        click.echo(f"warning: no pods shown: {err}", err=True)
        client = None
    return ClusterSource(store, client, namespace)


@click.command("ui")
@click.option(
    "--outputs",
    type=PathArg(path_type=Path),
    default=Path("outputs"),
    show_default=True,
    help="Local mode: the folder of run outputs (<team>/<name>/).",
)
@click.option("--run", "run", default=None, help="Show only this run, TEAM/NAME.")
@click.option(
    "--clickhouse",
    default=None,
    metavar="URL",
    help="Cluster mode: the ClickHouse HTTP URL (credentials from the environment).",
)
@credential_options
@click.option("--cluster", default=None, help="Cluster mode: the kubeconfig context's cluster.")
@click.option("--namespace", "-n", default=None, help="Cluster mode: the team namespace.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=0, type=click.IntRange(0, 65535), show_default=True,
              help="Port to bind (0: any free port).")  # fmt: skip
def ui(outputs: Path, run: str | None, clickhouse: str | None, user_env: str, password_env: str,
       cluster: str | None, namespace: str | None, host: str, port: int) -> None:  # fmt: skip
    """Serve the workload dashboard: runs, membership, loss and step time, stragglers."""
    from runner.ui.server import make_server, url
    from runner.ui.sources import LocalSource

    only = parse_run(run)
    if clickhouse:
        source = cluster_source(clickhouse, cluster, namespace, user_env, password_env)
    else:
        if not outputs.is_dir():
            raise InputError("command line", "--outputs", f"{outputs} is not a folder")
        source = LocalSource(outputs, only)
    try:
        server = make_server(source, host, port)
    except OSError as err:
        raise InputError(
            "command line", "--port", f"cannot bind {host}:{port}: {err.strerror}"
        ) from None
    page = url(server) + (f"#{only[0]}/{only[1]}" if only else "")
    click.echo(f"runner ui: {page} (Ctrl-C stops)", err=False)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        source.close()
