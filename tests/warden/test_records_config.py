"""Telemetry rows (loaded into chDB), the config file, Job manifests and CLI errors."""

from __future__ import annotations

import subprocess
import sys

import pytest

from catalog import InputError
from warden import jobs
from warden.config import load_config
from warden.fake import make_node
from warden.telemetry import TABLE_DDL, JsonlSink, record


def test_records_load_into_clickhouse_and_retries_collapse(tmp_path):
    import chdb.session

    sink = JsonlSink(tmp_path / "actions.jsonl")
    sink.write(record("ultra-usc1", "n1", "cordon", "XID 79", "run-a"))
    sink.write(record("ultra-usc1", "n1", "cordon", "XID 79", "run-a"))  # a retried attempt
    sink.write(record("ultra-usc1", "n1", "reboot", "repair reboot", "run-a"))
    assert [r.action for r in sink.read()] == ["cordon", "cordon", "reboot"]
    # In memory: chDB runs one server per process, shared with the other tests' sessions.
    db = chdb.session.Session()
    db.query("DROP TABLE IF EXISTS warden_actions")
    db.query(TABLE_DDL)
    db.query(f"INSERT INTO warden_actions SELECT * FROM file('{sink.path}', JSONEachRow)")
    query = "SELECT node, action, count() FROM warden_actions FINAL GROUP BY node, action"
    rows = db.query(query + " ORDER BY action", "CSV")
    assert str(rows).split() == ['"n1","cordon",1', '"n1","reboot",1']
    db.query("DROP TABLE warden_actions")


def write(tmp_path, text: str) -> str:
    path = tmp_path / "warden.yaml"
    path.write_text(text)
    return str(path)


GOOD = "cluster: ultra-usc1\njobs: {check_image: img}\n"


def test_config_defaults_and_overrides(tmp_path):
    config = load_config(write(tmp_path, GOOD + "timings: {drain_grace_s: 30}\n"))
    assert config.timings.drain_grace_s == 30 and config.timings.escalate_after == 3
    assert config.repair == "report-faulty-host" and config.prometheus is None
    assert load_config("warden/local.yaml").cluster == "ultra-usc1"


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        (GOOD + "timings: {drain_grace: 30}\n", "timings.drain_grace", "unknown key"),
        (GOOD + "repair: reboot\n", "repair", "report-faulty-host"),
        ("jobs: {check_image: img}\n", "cluster", "required key is missing"),
        (GOOD + "rules: {nvlink_errors: many}\n", "rules.nvlink_errors", "number"),
        ("- a\n", None, "expected a mapping"),
    ],
)
def test_config_errors_name_file_and_field(tmp_path, text, field, message):
    path = write(tmp_path, text)
    with pytest.raises(InputError) as err:
        load_config(path)
    assert err.value.source == path and err.value.field == field
    assert message in err.value.message


def test_cli_bad_config_is_one_line_and_exit_2(tmp_path):
    path = write(tmp_path, GOOD + "temporal: {adress: x}\n")
    done = subprocess.run(
        [sys.executable, "-m", "warden.cli", "worker", "--config", path],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == f"error: {path}: temporal.adress: unknown key"


@pytest.mark.parametrize("node", ["n1", "gke-ultra-usc1-h200-main-5c1a0b2d-x7q2", "x" * 80])
def test_job_names_fit_and_differ_per_remediation(node):
    a = jobs.job_name("diag", node, "01a22c7f-b262-778c-a2b4-ca404e6cef78")
    b = jobs.job_name("diag", node, "01a22c7f-b261-751d-9c77-95cc0f75cd4a")  # same prefix
    assert len(a) <= 63 and a != b and a.startswith("warden-diag-")


def test_diag_job_runs_on_the_cordoned_node():
    job = jobs.diag_job(make_node("n1"), 2, "dcgm:img", "warden", "rid-1", 600)
    spec = job["spec"]["template"]["spec"]
    assert spec["nodeName"] == "n1"
    assert {
        "key": "node.kubernetes.io/unschedulable",
        "operator": "Exists",
        "effect": "NoSchedule",
    } in spec["tolerations"]
    assert spec["containers"][0]["command"][-1] == "nv-hostengine && dcgmi diag -r 2"
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["activeDeadlineSeconds"] == 600


def test_config_from_the_environment_alone_and_over_a_file(tmp_path):
    env = {
        "WARDEN_CLUSTER": "mega-euw4",
        "WARDEN_TEMPORAL_ADDRESS": "temporal-frontend.warden.svc:7233",
        "WARDEN_PROMETHEUS_URL": "http://gmp-frontend.observability.svc:9090",
        "WARDEN_CHECK_NAMESPACE": "warden",
        "WARDEN_CHECK_IMAGE": "europe-docker.pkg.dev/p/training/warden:2026.11.0",
        "WARDEN_METRICS_ADDRESS": "0.0.0.0:9464",
        "UNRELATED": "x",
    }
    config = load_config(None, env)
    assert config.cluster == "mega-euw4" and config.prometheus.url.endswith(":9090")
    assert config.temporal.address == "temporal-frontend.warden.svc:7233"
    assert config.jobs.check_image.endswith("warden:2026.11.0")
    assert config.metrics_address == "0.0.0.0:9464"
    over = load_config(write(tmp_path, GOOD), {"WARDEN_CLUSTER": "mega-euw4"})
    assert (over.cluster, over.jobs.check_image) == ("mega-euw4", "img")
    with pytest.raises(InputError) as err:
        load_config(None, {"WARDEN_CLUSTER": "mega-euw4"})
    assert err.value.line() == "environment: jobs: required key is missing"
