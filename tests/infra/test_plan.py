"""The offline plan: `python -m infra.plan CLUSTER` prints the resource graph."""

from __future__ import annotations

import json

import pytest

from infra import plan

from .conftest import NODE_POOL


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
        "reve:infra:CrossRegion",
        "reve:infra:Identity",
        "reve:infra:MultiNetwork",
        "reve:infra:Network",
        "reve:infra:NodePools",
        "reve:infra:Storage",
    ]
    start = lines.index("  gcp:container/nodePool:NodePool  ultra-usc1-h200-main")
    block = lines[
        start + 1 : lines.index("  gcp:container/nodePool:NodePool  ultra-usc1-h200-spot")
    ]
    assert "      nodeConfig.machineType: a3-ultragpu-8g" in block
    assert "      nodeCount: 0" in block  # the future reservation is not delivered yet
    assert "      placementPolicy.type: COMPACT" in block
    [affinity] = [line for line in block if "reservationAffinity" in line]
    assert '"consumeReservationType":"SPECIFIC_RESERVATION"' in affinity
    nics = block.index("      networkConfig.additionalNodeNetworkConfigs:")
    assert block[nics + 1].startswith("        - {") and len(block[nics + 1 :]) == 9
    assert "registry_url = us-docker.pkg.dev/reve-train-ultra/training" in lines


@pytest.mark.parametrize("name", ["mega-euw4", "ultra-usc1"])
def test_committed_plan_is_current(programs, name):
    """infra/plans/<cluster>.txt is what the program declares now (a PR shows its diff)."""
    committed = (plan.PLANS / f"{name}.txt").read_text()
    assert plan.text_plan(programs[name], name) + "\n" == committed, (
        "run `python -m infra.plan --write` and review the diff of infra/plans/"
    )


def test_every_cluster_has_a_committed_plan():
    from catalog import cluster_names

    assert sorted(p.stem for p in plan.PLANS.glob("*.txt")) == cluster_names()


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


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("novalue", "--set: expected key=value, got 'novalue'"),
        ("=x", "--set: expected key=value, got '=x'"),
        ("awaitingDelivery=h200-main", "--set: awaitingDelivery: expected a JSON list of strings"),
        ('awaitingDelivery=["nope"]', "--set: awaitingDelivery: 'nope' is not a reserved GPU"),
        (
            'awaitingDelivery=["h200-spot"]',
            "--set: awaitingDelivery: 'h200-spot' is not a",
        ),
        ('adminCidrs=["10.0.0.300/32"]', "--set: adminCidrs: '10.0.0.300/32' is not a CIDR"),
        ("adminCidrs=10.0.0.0/8", "--set: adminCidrs: expected a JSON list of strings"),
        ("repoUrl=", "--set: repoUrl: required"),
        ('awaitingDelivry=["h200-main"]', "--set: awaitingDelivry: unknown setting (known: "),
    ],
)
def test_bad_set_is_one_line(capsys, bad, message):
    assert plan.main(["ultra-usc1", "--set", bad]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith(message), err


def test_set_values_stay_text():
    assert plan.parse_sets(["revision=1.10", "adminCidrs=[]"]) == {
        "revision": "1.10",
        "adminCidrs": "[]",
    }


@pytest.mark.parametrize("argv", [[], ["--write", "mega-euw4"], ["--write", "--json"]])
def test_cluster_or_write(argv):
    with pytest.raises(SystemExit) as exit_:
        plan.main(argv)
    assert exit_.value.code == 2


@pytest.mark.parametrize(
    ("path", "value"),
    [("a.b", 1), ("a.c", None), ("x", None)],
)
def test_pick(path, value):
    assert plan.pick({"a": {"b": 1}}, path) == value


def test_future_reservation_delivered_gives_the_pool_its_size(tmp_path):
    """Both states of a future reservation: before delivery 0 nodes, after it the pool size."""
    import yaml

    from catalog import load_cluster
    from infra.mocks import run

    data = load_cluster("ultra-usc1").model_dump(mode="json", exclude_none=True)
    data["gpu_pools"][0]["reservation"]["future"]["delivered"] = True
    folder = tmp_path / "clusters" / "ultra-usc1"
    folder.mkdir(parents=True)
    (folder / "cluster.yaml").write_text(yaml.safe_dump(data))
    peer = tmp_path / "clusters" / "mega-euw4"  # its VPC peers with ultra-usc1's
    peer.mkdir()
    (peer / "cluster.yaml").write_text(load_cluster("mega-euw4").model_dump_json())
    before, after = run("ultra-usc1"), run("ultra-usc1", root=tmp_path)
    for program, count in ((before, 0), (after, 128)):
        by_name = {r.inputs["name"]: r.inputs for r in program.of_type(NODE_POOL)}
        assert by_name["h200-main"]["nodeCount"] == count
        assert len(program.of_type("gcp:compute/futureReservation:FutureReservation")) == 1
