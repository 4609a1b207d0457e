"""`runner submit`: render a run, then stage it for a pull request (default) or apply it.

    runner submit tiny-lm rayjob --cluster ultra-usc1 --namespace research --pods 2 \\
        --gpus 8 --accelerators H200 --docker-image IMAGE@sha256:... --cmd 'python train.py'
    runner submit -f runs/examples/tiny-lm.yaml --pods 4      # flags override the file
    runner submit -f runs/examples/tiny-lm.yaml --apply       # straight to the cluster

GitOps (default): the manifests `apps/<cluster>/<namespace>/<run>.yaml` and, when flags were
given, the effective run definition `runs/<cluster>/<namespace>/<run>.yaml` are committed onto
branch `run/<run>` through a temporary index; the working tree, the index and the current
branch stay exactly as they are. Outside a git repository (or with `--no-stage`) the files are
written and the git commands printed. `--apply` writes nothing and applies through `runner.kube`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
import yaml

from catalog import exitcodes
from catalog.errors import InputError
from catalog.loader import repo_root
from runner import gitops, gitstage
from runner.commands._run_flags import load_with_flags, overrides_from, run_options
from runner.commands.render import apps_text, warn
from runner.render import render as render_spec
from runner.spec import build_spec, display_path, dump_spec
from runner.spec_schema import COMMAND_LINE, RunSpec

RUN_FILE_HEADER = (
    "# Run definition written by `runner submit`; edit it and run `runner render {}`.\n"
)


def get_kube(cluster: str):
    """The Kubernetes client for `cluster` (tests monkeypatch this or `runner.kube.connect`)."""
    from runner import kube

    return kube.connect(cluster=cluster)


def apply_run(client, manifests: list[dict]) -> list[str]:
    """Apply every object in order; the sentinel is owned by its RayCluster once it has a uid."""
    applied, owner = [], None
    for obj in manifests:
        if obj["kind"] == "Deployment" and owner is not None:
            obj = {**obj, "metadata": {**obj["metadata"], "ownerReferences": [owner]}}
        result = client.apply(obj)
        uid = (result or {}).get("metadata", {}).get("uid")
        if obj["kind"] == "RayCluster" and uid:
            owner = {
                "apiVersion": obj["apiVersion"],
                "kind": "RayCluster",
                "name": obj["metadata"]["name"],
                "uid": uid,
            }
        applied.append(f"{obj['kind']} {obj['metadata']['namespace']}/{obj['metadata']['name']}")
    return applied


def preflight_after_apply(client, spec: RunSpec, wait: float, teardown: bool | None) -> bool:
    """Preflight the run once the cluster has placed its pods (docs/preflight.md).

    Returns False when a check failed (after offering the teardown). Disable it with
    `preflight: false` in the run definition or `--no-preflight`.
    """
    from runner.commands.preflight import conclude
    from runner.preflight.remote import preflight_run

    click.echo(f"preflight: waiting up to {wait:g}s for the pods of {spec.name} to be placed")
    rows = preflight_run(client, spec.namespace, spec.name, placement_timeout=wait)
    return conclude(client, spec.namespace, spec.name, rows, teardown)


def run_file(spec: RunSpec) -> Path:
    return repo_root() / "runs" / spec.cluster / spec.namespace / f"{spec.name}.yaml"


def run_file_text(spec: RunSpec, relative: str) -> str:
    """The effective run definition, so `runner render --check` can reproduce apps/."""
    data = dump_spec(spec)
    source, label = spec.where("env_file")
    if spec.env_file and source == COMMAND_LINE:
        data["env_file"] = display_path(spec.env_file)  # flags are cwd-relative
        if Path(data["env_file"]).is_absolute():
            raise InputError(
                source,
                label,
                f"{spec.env_file} is outside the repository; a committed run needs a "
                "committed env file (e.g. under runs/env/)",
            )
    text = RUN_FILE_HEADER.format(relative)
    return text + yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def build(name, kind, file, options: dict) -> RunSpec:
    """The run from NAME, TYPE, -f FILE and flags (flags and arguments win over the file)."""
    overrides, typed = overrides_from(options)
    if name:
        overrides["name"], typed["name"] = name, "NAME"
    if kind:
        if overrides.get("type", kind) != kind:
            raise InputError(COMMAND_LINE, "--type", f"conflicts with TYPE {kind!r}")
        overrides["type"], typed["type"] = kind, "TYPE"
    if file:
        return load_with_flags(file, overrides, typed)
    return build_spec({}, COMMAND_LINE, overrides, typed)


def gitops_files(spec: RunSpec) -> tuple[RunSpec, dict[str, str], str]:
    """(spec as committed, repository path -> text, totals) of a run; nothing is written."""
    files = {}
    if spec.origin == COMMAND_LINE or spec.overridden():
        relative = gitops.relative_to_root(run_file(spec))
        text = run_file_text(spec, relative)
        files[relative] = text
        spec = build_spec(yaml.safe_load(text), relative)
    rendered = render_spec(spec)
    gitops.check_unique(spec.cluster, spec.namespace, spec.name, spec.origin)
    apps = gitops.apps_path(spec.cluster, spec.namespace, spec.name)
    files[gitops.relative_to_root(apps)] = apps_text(rendered)
    return spec, files, rendered.summary()


def stage_or_write(spec: RunSpec, files: dict[str, str], totals: str, no_stage: bool) -> None:
    root = repo_root()
    message = f"run {spec.name} on {spec.cluster}/{spec.namespace}: {totals}"
    if not no_stage and gitstage.has_commits(root):
        try:
            commit = gitstage.stage(root, spec.name, files, message)
        except gitstage.GitError as err:
            click.echo(f"error: {err}", err=True)
            sys.exit(exitcodes.FAILURE)
        branch = gitstage.branch_name(spec.name)
        click.echo(f"committed {', '.join(files)} on branch {branch} ({commit[:12]})")
        click.echo(f"the working tree is unchanged; next: git push -u origin {branch}")
        return
    for relative, text in files.items():
        gitops.write(root / relative, text)
    click.echo(f"wrote {', '.join(files)}")
    if no_stage:
        return
    click.echo("not a git repository with commits; stage the run with:")
    for line in gitstage.manual_commands(spec.name, list(files), message):
        click.echo(f"  {line}")


@click.command()
@click.argument("name", required=False)
@click.argument("kind", metavar="[TYPE]", required=False)
@click.option("-f", "--file", "file", metavar="RUN.yaml", help="run definition to start from")
@click.option("--apply", "apply_", is_flag=True, help="apply through the Kubernetes API")
@click.option("--dry-run", is_flag=True, help="render and validate; write and apply nothing")
@click.option("--no-stage", is_flag=True, help="write the files but create no branch")
@click.option(
    "--yes/--no",
    "teardown",
    default=None,
    help="with --apply, on a preflight failure tear the run down (--yes) or keep it (--no)",
)
@click.option(
    "--preflight-wait",
    type=click.FloatRange(min=0),
    default=900,
    show_default=True,
    help="with --apply, seconds to wait for placement before preflight",
)
@run_options
@click.pass_context
def submit(
    ctx: click.Context,
    name,
    kind,
    file,
    apply_,
    dry_run,
    no_stage,
    teardown,
    preflight_wait,
    **options,
) -> None:
    """Submit run NAME of TYPE (rayjob|raycluster|job), from flags and/or -f RUN.yaml."""
    if not name and not file:
        raise InputError(COMMAND_LINE, "NAME", "give NAME TYPE and flags, or -f RUN.yaml")
    spec = build(name, kind, file, options)
    rendered = render_spec(spec)
    totals = rendered.summary()
    click.echo(f"{spec.name}: {totals}")
    if apply_ and rendered.notices:  # its pods could not start: refuse, saying why
        raise InputError(COMMAND_LINE, "--apply", f"refused: {rendered.notices[0]}")
    warn(rendered.notices)
    if dry_run:
        click.echo("dry run: nothing written or applied")
        return
    if apply_:
        from runner.kube import KubeError

        try:
            client = get_kube(spec.cluster)
            applied = apply_run(client, rendered.manifests)
            for line in applied:
                click.echo(f"applied {line}")
            if spec.preflight and not preflight_after_apply(client, spec, preflight_wait, teardown):
                sys.exit(exitcodes.FAILURE)
        except KubeError as err:
            click.echo(f"error: {err}", err=True)
            sys.exit(exitcodes.FAILURE)
        return
    spec, files, totals = gitops_files(spec)
    stage_or_write(spec, files, totals, no_stage)
