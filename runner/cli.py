"""Entry point of the `runner` command.

Subcommands load lazily from `COMMANDS` so `runner --help` imports neither torch, ray nor
pulumi; each command module imports what it needs when it runs. User mistakes raise
`catalog.InputError` and end as one line on stderr with exit code 2.
"""

from __future__ import annotations

import importlib
import sys

import click

from catalog import exitcodes
from catalog.errors import InputError

# name -> (module:attribute, one-line help). Help lives here so `--help` imports nothing.
COMMANDS: dict[str, tuple[str, str]] = {
    "render": ("runner.commands.render:render", "Render run definitions into apps/."),
    "submit": ("runner.commands.submit:submit", "Render a run and stage it or apply it."),
    "validate": ("runner.commands.render:validate", "Check run definitions without writing."),
    "catalog": ("runner.commands.catalog:catalog", "Show clusters and accelerators."),
    "run": ("runner.commands.run:run", "Run a run definition locally on an embedded Ray."),
    "preflight": ("runner.commands.preflight:preflight", "Check the machines of a run."),
    "check": ("runner.commands.check:check", "Check one node with a pinned Job."),
    "list": ("runner.commands.list:list_runs", "List runs on a cluster."),
    "status": ("runner.commands.status:status", "Show a run's state and pods."),
    "describe": ("runner.commands.describe:describe", "Describe a run: objects, pods, events."),
    "logs": ("runner.commands.logs:logs", "Print a run's logs (head, rank or pod)."),
    "delete": ("runner.commands.delete:delete", "Delete a run and its pods."),
    "shell": ("runner.commands.shell:shell", "Open a shell in a run's pod or a dev Job."),
    "cp": ("runner.commands.cp:cp", "Copy files to and from pods."),
    "port-forward": ("runner.commands.port_forward:port_forward", "Forward local ports to a pod."),
    "diagnose": ("runner.commands.diagnose:diagnose", "Bundle a run's logs, events, crash files."),
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported only when invoked."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module_name, attribute = COMMANDS[name][0].split(":")
        return getattr(importlib.import_module(module_name), attribute)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """List subcommands from the registry, without importing them."""
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="reve-platform", prog_name="runner")
def cli() -> None:
    """Launch, render and inspect training runs on the platform's GKE clusters.

    \b
    Exit codes: 0 ok, 1 failure, 2 bad input (nothing written),
    3 rendered manifests differ from apps/, 4 not found.
    """


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; bad input becomes one line on stderr and exit code 2."""
    try:
        code = cli.main(args=argv, prog_name="runner", standalone_mode=False)
    except InputError as err:
        click.echo(f"error: {err.line()}", err=True)
        sys.exit(exitcodes.USAGE)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(exitcodes.FAILURE)
    except click.UsageError as err:
        where = err.ctx.command_path if err.ctx else "runner"
        click.echo(f"error: command line: {err.format_message()} (see {where} --help)", err=True)
        sys.exit(exitcodes.USAGE)
    except click.ClickException as err:
        err.show()
        sys.exit(exitcodes.USAGE if err.exit_code == 2 else err.exit_code)
    except click.exceptions.Exit as err:
        sys.exit(err.exit_code)
    sys.exit(code if isinstance(code, int) else exitcodes.OK)


if __name__ == "__main__":
    main()
