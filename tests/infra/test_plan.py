"""The offline plan: `python -m infra.plan CLUSTER` prints the resource graph."""

from __future__ import annotations

import json

import pytest

from infra import plan


def plan_run(name, config=None):
    from infra.mocks import run

    return run(name, config)


def test_text_plan_shows_components_children_and_outputs(programs):
    text = plan.text_plan(programs["ultra-usc1"], "ultra-usc1")
    lines = text.splitlines()
    count = len(programs["ultra-usc1"].resources)
    assert lines[0] == f"# offline plan of stack ultra-usc1: {count} resources (Pulumi mocks)"
    components = [line for line in lines if line.startswith("reve:infra:")]
    assert [c.split()[0] for c in components] == [
        "reve:infra:ArgoCD",
        "reve:infra:Cluster",
        "reve:infra:Identity",
        "reve:infra:MultiNetwork",
        "reve:infra:Network",
        "reve:infra:NodePools",
        "reve:infra:Storage",
    ]
    pool = next(line for line in lines if "NodePool  ultra-usc1-h200-main" in line)
    assert pool.startswith("  gcp:container/nodePool:NodePool")
    assert "nodeConfig.machineType=a3-ultragpu-8g" in pool
    assert "nodeCount=128" in pool
    assert '"consumeReservationType":"SPECIFIC_RESERVATION"' in pool
    assert "registry_url = us-docker.pkg.dev/reve-train-ultra/training" in lines


def test_plan_is_deterministic(programs):
    again = plan_run("mega-euw4")
    assert plan.text_plan(again, "mega-euw4") == plan.text_plan(programs["mega-euw4"], "mega-euw4")
    assert plan.json_plan(again) == plan.json_plan(programs["mega-euw4"])


def test_json_plan_names_parents(programs):
    data = json.loads(plan.json_plan(programs["mega-euw4"]))
    rows = data["resources"]
    assert len(rows) == len(programs["mega-euw4"].resources)
    for row in rows:
        if row["type"].startswith("reve:infra:"):
            assert row["parent"] is None
        else:
            assert row["parent_type"].startswith("reve:infra:")
    assert data["outputs"]["checkpoint_bucket"] == "reve-mega-euw4-checkpoints"


def test_main_prints_plan(capsys):
    assert plan.main(["mega-euw4", "--set", "revision=v1.2.3"]) == 0
    out = capsys.readouterr().out
    assert '"targetRevision":"v1.2.3"' in out
    assert out.count("gcp:container/nodePool:NodePool") == 3


def test_awaiting_delivery_declares_zero_nodes(capsys):
    assert plan.main(["ultra-usc1", "--json", "--set", 'awaitingDelivery=["h200-main"]']) == 0
    rows = json.loads(capsys.readouterr().out)["resources"]
    counts = {
        r["inputs"]["name"]: r["inputs"].get("nodeCount")
        for r in rows
        if r["type"].endswith(":NodePool")
    }
    assert counts["h200-main"] == 0


@pytest.mark.parametrize("bad", ["novalue", "=x"])
def test_bad_set_is_one_line(capsys, bad):
    assert plan.main(["mega-euw4", "--set", bad]) == 2
    assert capsys.readouterr().err.count("\n") == 1


@pytest.mark.parametrize(
    ("path", "value"),
    [("a.b", 1), ("a.c", None), ("x", None)],
)
def test_pick(path, value):
    assert plan.pick({"a": {"b": 1}}, path) == value
