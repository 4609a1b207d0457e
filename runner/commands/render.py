"""`runner render` and `runner validate`: run definitions into apps/ (or stdout), and the check.

runner render runs/examples/tiny-lm.yaml            # writes apps/ultra-usc1/research/tiny-lm.yaml
runner render runs/examples/tiny-lm.yaml -o - --pods 4
runner render --check                               # exit 3 when apps/ differs
runner validate runs/examples/*.yaml                # check only, write nothing

An experiment file (runner.experiment: it lists `learners`) renders one file per cluster it
touches, `apps/<cluster>/<namespace>/<experiment>.yaml`: that cluster's learner RayJobs and,
in the synchronizer's cluster, its Job and Service. Run flags do not apply to experiments.
The run flags themselves (`run_options`, `overrides_from`) are `runner.commands._run_flags`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from catalog import exitcodes
from catalog.errors import InputError
from runner import experiment, gitops
from runner.commands._run_flags import flag_words, load_with_flags, overrides_from, run_options
from runner.render import Rendered
from runner.render import render as render_spec
from runner.runfile import shown
from runner.spec import read_run
from runner.spec_schema import COMMAND_LINE, RunSpec


def apps_text(rendered: Rendered, flags: list[str] | tuple[str, ...] = ()) -> str:
    """The apps/ file: a header naming the source, the flags and the totals, then manifests."""
    spec = rendered.plan.spec
    head = gitops.header(spec.origin, rendered.summary(), list(flags), rendered.notices)
    return head + gitops.dump(rendered.manifests)


def render_to_apps(spec: RunSpec, flags: list[str]) -> tuple[Rendered, Path, str]:
    """Render and check the name is free: (rendered, apps/ path, apps/ text); writes nothing."""
    rendered = render_spec(spec)
    gitops.check_unique(spec.cluster, spec.namespace, spec.name, spec.origin)
    path = gitops.apps_path(spec.cluster, spec.namespace, spec.name)
    return rendered, path, apps_text(rendered, flags)


@dataclass
class Planned:
    """One apps/ file to write: what it holds (run or experiment name), its source, totals."""

    name: str
    origin: str
    totals: str
    text: str
    notices: tuple[str, ...] = ()


def experiment_files(data: dict, origin: str, check_names: bool = True) -> dict[Path, Planned]:
    """An experiment's apps/ files (one per cluster it touches), rendered and validated;
    with `check_names`, each file's name must be free (or already this experiment's)."""
    exp = experiment.build_experiment(data, origin)
    files = {}
    for cluster, parts in experiment.by_cluster(experiment.render_parts(exp)).items():
        if check_names:
            gitops.check_unique(cluster, exp.namespace, exp.name, origin)
        totals = experiment.cluster_totals(parts)
        manifests = [m for part in parts for m in part.manifests]
        notices = tuple(n for part in parts for n in part.notices)
        text = gitops.header(origin, totals, [], notices) + gitops.dump(manifests)
        path = gitops.apps_path(cluster, exp.namespace, exp.name)
        files[path] = Planned(exp.name, origin, totals, text, notices)
    return files


def source_files(
    path: str | Path, overrides: dict[str, Any], typed: dict[str, str], check_names: bool = True
) -> dict[Path, Planned]:
    """The apps/ files one run definition or experiment file renders to; writes nothing."""
    data, origin = read_run(path)
    if experiment.is_experiment(data):
        if overrides:
            flag = next(iter(typed.values()), "--set")
            message = f"{origin} is an experiment: run flags do not apply"
            raise InputError(COMMAND_LINE, flag, message)
        return experiment_files(data, origin, check_names)
    rendered = render_spec(load_with_flags(path, overrides, typed))
    spec = rendered.plan.spec
    if check_names:
        gitops.check_unique(spec.cluster, spec.namespace, spec.name, spec.origin)
    text = apps_text(rendered, flag_words(overrides, typed))
    target = gitops.apps_path(spec.cluster, spec.namespace, spec.name)
    planned = Planned(spec.name, spec.origin, rendered.summary(), text, rendered.notices)
    return {target: planned}


def warn(notices) -> None:
    """Each notice (runner.unbuilt) on one line of stderr."""
    for line in dict.fromkeys(notices):
        click.echo(f"warning: {line}", err=True)


def _relative(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def check_apps() -> list[gitops.Difference]:
    """Re-render every committed run definition; the apps/ files that differ."""
    differences, expected = [], {}
    for source in gitops.run_definitions():
        for path, planned in source_files(source, {}, {}, check_names=False).items():
            if path in expected:
                where = "/".join(path.parts[-3:-1])
                message = f"run {planned.name!r} in {where} is also defined by {expected[path]}"
                raise InputError(planned.origin, "name", message)
            expected[path] = planned.origin
            old = gitops.read_apps_file(path)
            if old != planned.text:
                name = _relative(path)
                diff = gitops.diff_text(name, old, planned.text)
                differences.append(gitops.Difference(name, diff))
    for path in gitops.orphans(set(expected)):
        name = _relative(path)
        text = f"{name}: no run definition renders this file (source gone or flags used)\n"
        differences.append(gitops.Difference(name, text))
    for path, why in gitops.foreign(set(expected)):
        name = _relative(path)
        differences.append(gitops.Difference(name, f"{name}: {why}\n"))
    return differences


@click.command()
@click.argument("runs", nargs=-1, metavar="RUN.yaml...")
@click.option("-o", "--output", default=None, metavar="-", help="'-' prints instead of writing")
@click.option("--dry-run", is_flag=True, help="render and validate; write nothing")
@click.option("--check", is_flag=True, help="re-render every committed run; exit 3 on a diff")
@run_options
@click.pass_context
def render_command(ctx: click.Context, runs, output, dry_run, check, **options) -> None:
    """Render run definitions (RUN.yaml, flags override) into apps/<cluster>/<ns>/<run>.yaml."""
    if check:
        if runs:
            raise InputError(COMMAND_LINE, "--check", "takes no RUN files")
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
        raise InputError(COMMAND_LINE, "RUN", "give a run definition file (or --check)")
    if output not in (None, "-"):
        message = f"{shown(output)}: only '-' (stdout) is supported"
        raise InputError(COMMAND_LINE, "--output", message)
    overrides, typed = overrides_from(options)
    if output == "-":
        texts = [f for run in runs for f in source_files(run, overrides, typed, False).values()]
        for planned in texts:
            click.echo(planned.text, nl=False)
            click.echo(f"{planned.name}: {planned.totals}", err=True)
            warn(planned.notices)
        return
    plan: dict[Path, Planned] = {}
    for run in runs:  # every run renders before anything is written: all or nothing
        for path, planned in source_files(run, overrides, typed).items():
            if path in plan:
                where = "/".join(path.parts[-3:-1])
                raise InputError(planned.origin, "name", f"run {planned.name!r} in {where} is "
                                 f"also defined by {plan[path].origin}")  # fmt: skip
            plan[path] = planned
    changed = {} if dry_run else gitops.write_all({p: f.text for p, f in plan.items()})
    for path, planned in plan.items():
        verb = "would write" if dry_run else ("wrote" if changed[path] else "unchanged")
        click.echo(f"{verb} {_relative(path)}: {planned.totals}")
    warn(n for planned in plan.values() for n in planned.notices)


render_command.name = "render"
render = render_command


@click.command("validate")
@click.argument("runs", nargs=-1, required=True, metavar="RUN.yaml...")
@run_options
def validate(runs, **options) -> None:
    """Check run definitions (and every manifest they render) without writing anything."""
    overrides, typed = overrides_from(options)
    for run in runs:
        data, _ = read_run(run)
        if experiment.is_experiment(data):
            for path, planned in source_files(run, overrides, typed).items():
                kinds = kinds_of(planned.text)
                click.echo(f"ok {run} in {path.parts[-3]}: {kinds}; {planned.totals}")
                warn(planned.notices)
            continue
        spec = load_with_flags(run, overrides, typed)
        rendered = render_spec(spec)
        gitops.check_unique(spec.cluster, spec.namespace, spec.name, spec.origin)
        kinds = ", ".join(m["kind"] for m in rendered.manifests)
        click.echo(f"ok {run}: {kinds}; {rendered.summary()}")
        warn(rendered.notices)


def kinds_of(text: str) -> str:
    """`RayJob, Job, Service`: the kinds of an apps/ text's objects."""
    import yaml

    return ", ".join(d["kind"] for d in yaml.safe_load_all(text) if d)
