"""`runner diagnose`: everything needed to debug a run, and the failure analysis.

    runner diagnose tiny-lm -n research --out /tmp/tiny-lm.tar.gz     # one tar.gz
    runner diagnose tiny-lm -n research --analyze [--json]            # the verdict
    runner diagnose --analyze --local outputs/research/tiny-lm        # a local run's folder
    runner diagnose --analyze --local OUT --propose                   # the relaunch on a branch
    runner diagnose --analyze --local OUT --approve                   # asked at the terminal

The archive holds the run's objects, pods and events (YAML), each container's log (and the
previous one after a restart), the driver's crash bundles copied from the head pod, with
`--clickhouse` the run's log lines and its nodes' history from the store, and the bundles
kept in the run's bucket (runner.diagnose.collect). `--analyze` reads the same evidence
(or a local run's output folder) and prints a verdict (runner.diagnose: rules first, then
an optional language model for the summary); docs/diagnose.md.
"""

from __future__ import annotations

import sys
import tarfile
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import click

from runner.commands._day2 import (
    Day2Command,
    client,
    cluster_option,
    find_run,
    kube_errors,
    namespace_option,
    pick_pod,
)
from runner.commands._day2_views import summary
from runner.commands._store_flags import credential_options
from runner.commands._types import PathArg
from runner.diagnose.collect import crash_bundles, pod_logs, safe_name  # noqa: F401 (API)

LOG_TAIL = 5000


def archive(folder: Path, out: Path, root: str) -> None:
    """Every file under `folder` into a tar.gz, under `root/`."""
    with tarfile.open(out, "w:gz") as tar:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            tar.add(str(path), arcname=f"{root}/{path.relative_to(folder).as_posix()}")


def collect_cluster(o, folder: Path) -> tuple[dict, list[str]]:
    """The cluster run's evidence into `folder`: (its summary, notes). `o`: the command's
    options (run, namespace, cluster, output_dir, tail, clickhouse, user_env, password_env,
    bundle_root)."""
    from runner.diagnose import collect

    kube = client(o.cluster)
    namespace, objects, pods = find_run(kube, o.namespace, o.run)
    info = summary(o.run, objects, pods)
    team = info["team"] or namespace
    output_dir = o.output_dir or f"outputs/{team}/{o.run}"
    source = pick_pod(pods, None, None, o.run)["metadata"]["name"] if pods else None
    notes = collect.collect(
        kube, namespace, o.run, info, objects, pods, folder, output_dir, o.tail, source
    )
    if o.clickhouse:
        from observability.store import ServerStore

        nodes = sorted({p.get("spec", {}).get("nodeName") for p in pods} - {None, ""})
        store = ServerStore(o.clickhouse, o.user_env, o.password_env)
        notes += collect.store_parts(folder, store, team, o.run, nodes)
    root = o.bundle_root or (o.analyze and bucket_of(kube_cluster_name(info, o.cluster)))
    if root:
        notes += collect.bucket_bundles(folder, root, team, o.run)
    (folder / "NOTES.txt").write_text("\n".join(notes) + "\n")
    info["collected"] = {"pods": len(pods), "events": events_in(folder)}
    return info, notes


def events_in(folder: Path) -> int:
    import yaml

    try:
        return len([e for e in yaml.safe_load_all((folder / "events.yaml").read_text()) if e])
    except (OSError, yaml.YAMLError):
        return 0


def kube_cluster_name(info: dict, cluster: str | None) -> str | None:
    return info.get("cluster") or cluster


def bucket_of(cluster: str | None) -> str | None:
    """`gs://<bundles bucket>` of a catalog cluster, or None."""
    if not cluster:
        return None
    try:
        from catalog import load_cluster

        return f"gs://{load_cluster(cluster).buckets.bundles}"
    except Exception:
        return None


def interactive() -> bool:
    """Whether a person is at the terminal (standard input is one)."""
    return sys.stdin.isatty()


def model_client(endpoint, model, key_env, kind):
    """The model client of the --model-* flags, or None."""
    if not endpoint:
        return None
    from runner.diagnose.model import Client, ModelError

    try:
        if (
            kind or ("vertex" if "aiplatform.googleapis.com" in endpoint else "openai")
        ) == "vertex":
            return Client.vertex(endpoint, key_env)
        return Client.openai(endpoint, model or "default", key_env)
    except ModelError as err:
        raise click.UsageError(str(err)) from None


def key_of(env: str | None) -> bytes | None:
    """The run key's secret from an environment variable (checks bundle signatures)."""
    import os

    value = os.environ.get(env or "") if env else None
    return value.encode() if value else None


@click.command("diagnose", cls=Day2Command)
@click.argument("run", required=False)
@namespace_option
@cluster_option
@click.option(
    "--out",
    "out",
    type=PathArg(dir_okay=False, path_type=Path),
    help="Archive path (default ./<run>-diagnose-<time>.tar.gz).",
)
@click.option(
    "--output-dir", help="The run's output dir in the pod (default outputs/<team>/<run>)."
)
@click.option(
    "--tail",
    type=click.IntRange(min=1),
    default=LOG_TAIL,
    show_default=True,
    help="Log lines per container.",
)
@click.option("--analyze", is_flag=True, help="Analyse the failure and print a verdict.")
@click.option(
    "--local",
    "local",
    type=click.Path(file_okay=False, path_type=Path),
    help="With --analyze: a local run's output folder (what `runner run --local` "
    "prints), or a crash bundle folder.",
)
@click.option("--json", "as_json", is_flag=True, help="With --analyze: the verdict as JSON.")
@click.option(
    "--propose",
    is_flag=True,
    help="Commit the proposed relaunch on branch run/<name> for a pull request.",
)
@click.option(
    "--approve",
    is_flag=True,
    help="Ask at the terminal, then commit the relaunch and hand the culprit nodes "
    "to Warden for a check.",
)
@click.option(
    "--clickhouse",
    help="The platform's ClickHouse (HTTP): the run's "
    "log lines and its nodes' history for the evidence.",
)
@credential_options
@click.option(
    "--bundle-root",
    help="Where the run's bundles are kept, to read the newest (with --analyze the default "
    "is the cluster's bundles bucket, gs://<bucket>).",
)
@click.option(
    "--key-env",
    default="REVE_CHECKPOINT_KEY",
    show_default=True,
    help="Environment variable holding the team's key: bundle signatures checked.",
)
@click.option(
    "--model-endpoint",
    help="A language model: an OpenAI-compatible base URL "
    "(http://host:port/v1) or a Vertex AI model URL.",
)
@click.option("--model", "model_name", help="The model's name (OpenAI-compatible endpoints).")
@click.option(
    "--model-key-env",
    help="Environment variable holding the model's API key "
    "(Vertex AI without it: Application Default Credentials).",
)
@click.option(
    "--model-kind",
    type=click.Choice(["openai", "vertex"]),
    help="The endpoint's API (default: vertex for aiplatform.googleapis.com).",
)
@click.option("--warden-url", help="Warden's gateway, for --approve (default $WARDEN_URL).")
@click.option(
    "--warden-token-file",
    help="A projected token for the gateway (audience "
    "warden), for --approve (default $WARDEN_TOKEN_FILE).",
)
@kube_errors
def diagnose(**opts) -> None:
    """Collect a run's crash bundle, logs, pods and events into one tar.gz; with --analyze,
    the failure's verdict (and with --propose or --approve, its relaunch)."""
    o = SimpleNamespace(**opts)
    if (o.propose or o.approve or o.as_json or o.local) and not o.analyze:
        raise click.UsageError("--local, --json, --propose and --approve go with --analyze")
    if not o.analyze:
        if not o.run:
            raise click.UsageError("give RUN (or --analyze --local OUTPUT_DIR)")
        return write_archive(o)
    if not o.run and not o.local:
        raise click.UsageError("give RUN or --local OUTPUT_DIR")
    if o.approve and not interactive():
        raise click.UsageError(
            "--approve asks a person at a terminal; use --propose for a pull request"
        )
    model = model_client(o.model_endpoint, o.model_name, o.model_key_env, o.model_kind)
    from runner.commands._diagnose_analyze import analyze_and_act

    analyze_and_act(o, key_of(o.key_env), model)


def write_archive(o) -> None:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = o.out or Path(f"{safe_name(o.run)}-diagnose-{stamp}.tar.gz")
    root = f"{safe_name(o.run)}-diagnose-{stamp}"
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / root
        folder.mkdir()
        info, notes = collect_cluster(o, folder)
        archive(folder, out, root)
    got = info["collected"]
    click.echo(f"wrote {out} ({got['pods']} pods, {got['events']} events; {'; '.join(notes)})")
