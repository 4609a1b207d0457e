"""Entry point of the `runner` command.

Subcommands load lazily from `COMMANDS` so `runner --help` imports neither torch, ray nor
pulumi; each command module imports what it needs when it runs. User mistakes raise
`catalog.InputError` and end as one line on stderr with exit code 2.
"""

from __future__ import annotations

import importlib
import os
import sys

import click

from catalog import exitcodes
from catalog.errors import InputError, printable

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
    "ui": ("runner.commands.ui:ui", "Serve the workload dashboard in a browser."),
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


MAX_LINE = 400  # characters of an error line; longer ones lose their middle


def one_line(text: str) -> str:
    """`text` as one short printable line: control characters escaped, the middle cut."""
    text = printable(text)
    if len(text) > MAX_LINE:
        half = (MAX_LINE - 5) // 2
        text = f"{text[:half]} ... {text[-half:]}"
    return text


def _say(text: str) -> None:
    """One line on stderr, whatever state stderr is in."""
    try:
        click.echo(one_line(text), err=True)
    except (OSError, ValueError):
        pass


def _standard_fds() -> None:
    """Give closed standard descriptors /dev/null, so no file we open lands on fd 0-2."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, os.O_RDWR)


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush cannot fail again."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError, AttributeError):
        pass


def _invoke(argv: list[str] | None) -> int:
    """Run the CLI; returns the exit code. Bad input is one line on stderr and code 2."""
    try:
        code = cli.main(args=argv, prog_name="runner", standalone_mode=False)
    except InputError as err:
        _say(f"error: {err.line()}")
        return exitcodes.USAGE
    except click.exceptions.Abort:
        _say("aborted")
        return exitcodes.FAILURE
    except click.UsageError as err:
        where = err.ctx.command_path if err.ctx else "runner"
        _say(f"error: command line: {err.format_message()} (see {where} --help)")
        return exitcodes.USAGE
    except click.ClickException as err:
        if type(err).show is click.ClickException.show:
            _say(f"Error: {err.format_message()}")
        else:
            try:
                err.show()  # a command's own one-line form (runner.commands._day2.Failure)
            except (OSError, ValueError):
                pass
        return exitcodes.USAGE if err.exit_code == 2 else err.exit_code
    except click.exceptions.Exit as err:
        return err.exit_code
    except SystemExit as end:
        return end.code if isinstance(end.code, int) else exitcodes.FAILURE
    return code if isinstance(code, int) else exitcodes.OK


def main(argv: list[str] | None = None) -> None:
    """Run the CLI and exit. A closed pipe on stdout ends it quietly (exit 1); stdout that
    cannot be written (a full disk) is one line on stderr and exit 1: never a traceback."""
    _standard_fds()
    try:
        code = _invoke(argv)
        if sys.stdout is not None:
            sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
        code = exitcodes.FAILURE
    except OSError as err:
        _silence_stdout()
        where = f"{err.filename}: " if err.filename else "writing output: "
        _say(f"error: {where}{err.strerror or err}")
        code = exitcodes.FAILURE
    sys.exit(code)


if __name__ == "__main__":
    main()
