"""`runner render` and `runner validate`: run definitions into apps/ (or stdout), and the check.

runner render runs/examples/tiny-lm.yaml            # writes apps/ultra-usc1/research/tiny-lm.yaml
runner render runs/examples/tiny-lm.yaml -o - --pods 4
runner render --check                               # exit 3 when apps/ differs
runner validate runs/examples/*.yaml                # check only, write nothing
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from catalog.errors import InputError
from runner import exitcodes, gitops
from runner.render import Rendered
from runner.render import render as render_spec
from runner.spec import RunSpec, load_run

# flag -> (field, click options). Flags are the field names with dashes; a few aliases match
# the historical CLI (--accelerators, --docker-image, --env).
_VALUE_FLAGS: list[tuple[list[str], str, dict[str, Any]]] = [
    (["--type"], "type", {"type": click.Choice(["rayjob", "raycluster", "job"])}),
    (["--cluster"], "cluster", {}),
    (["--namespace", "-n"], "namespace", {}),
    (["--team"], "team", {}),
    (["--pods"], "pods", {"type": int}),
    (["--gpus"], "gpus", {"type": int}),
    (["--cpus"], "cpus", {}),
    (["--memory"], "memory", {}),
    (["--accelerator", "--accelerators"], "accelerator", {}),
    (["--image", "--docker-image"], "image", {}),
    (["--working-dir"], "working_dir", {}),
    (["--env-file", "--env"], "env_file", {}),
    (["--priority"], "priority", {}),
    (["--cmd"], "cmd", {}),
    (["--train-config"], "train_config", {}),
    (["--ttl-seconds"], "ttl_seconds", {"type": int}),
    (["--head-cpus"], "head_cpus", {}),
    (["--head-memory"], "head_memory", {}),
    (["--rack-affinity"], "rack_affinity", {"type": click.Choice(["block", "subblock"])}),
    (["--shm"], "shm", {}),
    (["--resource-group"], "resource_group", {}),
    (["--resume"], "resume", {"metavar": "URI"}),
]
_BOOL_FLAGS = [
    ("--preemptible/--no-preemptible", "preemptible"),
    ("--allow-mutable-tag/--no-allow-mutable-tag", "allow_mutable_tag"),
    ("--preflight/--no-preflight", "preflight"),
]


def run_options(function):
    """Decorate a command with one flag per run definition field (all default to unset)."""
    for flags, field, extra in reversed(_VALUE_FLAGS):
        help_text = RunSpec.model_fields[field].description
        function = click.option(*flags, field, default=None, help=help_text, **extra)(function)
    for flags, field in reversed(_BOOL_FLAGS):
        help_text = RunSpec.model_fields[field].description
        function = click.option(flags, field, default=None, help=help_text)(function)
    return click.option(
        "--set",
        "train_overrides",
        multiple=True,
        metavar="KEY=VALUE",
        help="driver config override; appended after the file's train_overrides",
    )(function)


def overrides_from(options: dict[str, Any]) -> dict[str, Any]:
    """The fields given on the command line (unset flags are left out)."""
    fields = [f for _, f, _ in _VALUE_FLAGS] + [f for _, f in _BOOL_FLAGS]
    found = {f: options[f] for f in fields if options.get(f) is not None}
    if options.get("train_overrides"):
        found["train_overrides"] = list(options["train_overrides"])
    return found


def load_with_flags(path: str, overrides: dict[str, Any]) -> RunSpec:
    """load_run with the command line's overrides (`--set` extends train_overrides)."""
    return load_run(path, overrides)


def flag_words(spec: RunSpec) -> list[str]:
    """`--pods 4` style words for the header of a file rendered with overrides."""
    words = []
    for field in spec.overridden():
        value = getattr(spec, field)
        words.append(f"--{field.replace('_', '-')}={value}")
    return words


def apps_text(rendered: Rendered) -> str:
    spec = rendered.plan.spec
    head = gitops.header(spec.origin, rendered.plan.totals(), flag_words(spec))
    return head + gitops.dump(rendered.manifests)


def render_to_apps(spec: RunSpec, dry_run: bool = False) -> tuple[Rendered, Path, bool]:
    """Render, check the name is free, write apps/<cluster>/<ns>/<run>.yaml unless dry_run."""
    rendered = render_spec(spec)
    gitops.check_unique(spec.cluster, spec.namespace, spec.name, spec.origin)
    path = gitops.apps_path(spec.cluster, spec.namespace, spec.name)
    changed = False if dry_run else gitops.write(path, apps_text(rendered))
    return rendered, path, changed


def _relative(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def check_apps() -> list[gitops.Difference]:
    """Re-render every committed run definition; the apps/ files that differ."""
    differences, expected = [], set()
    for source in gitops.run_definitions():
        rendered = render_spec(load_run(source))
        spec = rendered.plan.spec
        path = gitops.apps_path(spec.cluster, spec.namespace, spec.name)
        expected.add(path)
        new = apps_text(rendered)
        old = path.read_text() if path.exists() else ""
        if old != new:
            name = _relative(path)
            differences.append(gitops.Difference(name, gitops.diff_text(name, old, new)))
    for path in gitops.orphans(expected):
        name = _relative(path)
        text = f"{name}: no run definition renders this file (source gone or flags used)\n"
        differences.append(gitops.Difference(name, text))
    return differences


@click.command()
@click.argument("runs", nargs=-1, type=click.Path(dir_okay=False))
@click.option("-o", "--output", default=None, metavar="-", help="'-' prints instead of writing")
@click.option("--dry-run", is_flag=True, help="render and validate; write nothing")
@click.option("--check", is_flag=True, help="re-render every committed run; exit 3 on a diff")
@run_options
@click.pass_context
def render_command(ctx: click.Context, runs, output, dry_run, check, **options) -> None:
    """Render run definitions (RUN.yaml, flags override) into apps/<cluster>/<ns>/<run>.yaml."""
    if check:
        if runs:
            raise InputError("command line", "--check", "takes no RUN files")
        differences = check_apps()
        for difference in differences:
            click.echo(difference.diff, nl=False)
        if differences:
            click.echo(
                f"{len(differences)} file(s) in apps/ differ; run `runner render` "
                "on their run definitions",
                err=True,
            )
            sys.exit(exitcodes.DIFFERS)
        click.echo(f"apps/ matches {len(gitops.run_definitions())} run definitions")
        return
    if not runs:
        raise InputError("command line", "RUN", "give a run definition file (or --check)")
    if output not in (None, "-"):
        raise InputError("command line", "--output", f"{output!r}: only '-' (stdout) is supported")
    overrides = overrides_from(options)
    for run in runs:
        spec = load_with_flags(run, dict(overrides))
        if output == "-":
            rendered = render_spec(spec)
            click.echo(apps_text(rendered), nl=False)
            click.echo(f"{spec.name}: {rendered.plan.totals()}", err=True)
            continue
        rendered, path, changed = render_to_apps(spec, dry_run)
        verb = "would write" if dry_run else ("wrote" if changed else "unchanged")
        click.echo(f"{verb} {_relative(path)}: {rendered.plan.totals()}")


render_command.name = "render"
render = render_command


@click.command("validate")
@click.argument("runs", nargs=-1, required=True, type=click.Path(dir_okay=False))
@run_options
def validate(runs, **options) -> None:
    """Check run definitions (and every manifest they render) without writing anything."""
    overrides = overrides_from(options)
    for run in runs:
        spec = load_with_flags(run, dict(overrides))
        rendered = render_spec(spec)
        kinds = ", ".join(m["kind"] for m in rendered.manifests)
        click.echo(f"ok {run}: {kinds}; {rendered.plan.totals()}")
