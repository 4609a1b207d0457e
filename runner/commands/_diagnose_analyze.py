"""`runner diagnose --analyze`: gather the evidence, print the verdict, act only if asked.

`--propose` commits the relaunch on a branch (runner.diagnose.relaunch, as `runner submit`);
`--approve` shows the verdict, asks at the terminal before it commits the relaunch, and
asks again before it hands the culprit nodes to Warden's gateway for a node check. The
analysis and the model never act: what acts is this module, and only after a person said
so (the branch's merge, or a `y` at the terminal).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import click

from catalog import exitcodes


def analyze_and_act(o, key: bytes | None, model) -> None:
    """`o`: the command's options (runner.commands.diagnose)."""
    from runner.diagnose.analyze import analyze
    from runner.diagnose.verdict import render

    with tempfile.TemporaryDirectory() as scratch:
        if o.local is not None:
            if not o.local.is_dir():
                click.echo(f"error: --local: {o.local}: no such folder", err=True)
                raise SystemExit(exitcodes.NOT_FOUND)
            folder, where = o.local, {}
        else:
            from runner.commands.diagnose import collect_cluster

            folder = Path(scratch) / "evidence"
            folder.mkdir()
            info, _ = collect_cluster(o, folder)
            where = {"cluster": info.get("cluster") or o.cluster or "",
                     "namespace": info.get("namespace") or o.namespace or ""}  # fmt: skip
        verdict = analyze(folder, model=model, key=key)
    if o.run:  # the run asked about (a cluster run's name, whatever its bundle says)
        verdict.run["run"] = o.run
    click.echo(json.dumps(verdict.to_json(), indent=1) if o.as_json else render(verdict))
    if o.propose or o.approve:
        act(verdict, where, o.approve, o.warden_url, o.warden_token_file, quiet=o.as_json)


def act(verdict, where: dict, approve: bool, warden_url, token_file, quiet: bool) -> None:
    from runner.diagnose.relaunch import NoRelaunch

    try:
        commit_relaunch(verdict, where, ask=approve, quiet=quiet)
    except NoRelaunch as err:
        click.echo(f"no relaunch: {err}", err=True)
    nodes = verdict.proposal.get("warden_check") or []
    if approve and nodes:
        if click.confirm(f"Hand {', '.join(nodes)} to Warden for a node check?", default=False):
            hand_to_warden(nodes, verdict, warden_url, token_file)
        else:
            click.echo("nodes not handed to Warden")


def commit_relaunch(verdict, where: dict, ask: bool, quiet: bool) -> None:
    """Write the relaunch's run file and apps/ file on branch run/<name> (or, outside a
    repository with commits, into the work tree with the git commands that stage them)."""
    import yaml

    from catalog.loader import repo_root
    from runner.commands.submit import stage_or_write
    from runner.diagnose.relaunch import (
        NoRelaunch,
        files_for,
        relaunch_data,
        run_definition,
        taken_names,
    )
    from runner.spec import build_spec, display_path

    root = repo_root()
    name = verdict.run.get("run") or ""
    source = run_definition(name, root, where.get("cluster", ""), where.get("namespace", ""))
    if source is None:
        raise NoRelaunch(f"no committed run definition named {name!r} under runs/")
    data = yaml.safe_load(source.read_text())
    new, new_name = relaunch_data(data, verdict.proposal, name, taken_names(root))
    relative, files = files_for(new, verdict, display_path(source), root)
    if ask and not click.confirm(
        f"Commit the relaunch {new_name} ({verdict.proposal['text']}) on branch run/{new_name}?",
        default=False,
    ):
        click.echo("relaunch not committed")
        return
    spec = build_spec(yaml.safe_load(files[relative]), relative)
    stage_or_write(spec, files, f"relaunch of {name}: {verdict.decision}", no_stage=False)


def hand_to_warden(nodes: list[str], verdict, url, token_file) -> None:
    from warden.client import GatewayError, request_node_checks_sync

    reason = f"{verdict.category}: {verdict.why}"
    try:
        reply = request_node_checks_sync(
            url, nodes, reason, verdict.run.get("run") or "", token_file
        )
    except GatewayError as err:
        click.echo(f"error: {err}", err=True)
        raise SystemExit(exitcodes.FAILURE) from None
    started = [n for n, ok in reply.get("started", {}).items() if ok]
    skipped = reply.get("skipped", {})
    click.echo(
        f"Warden checks {', '.join(started) or 'no node'}"
        + (f"; skipped {skipped}" if skipped else "")
    )
