"""Cross-region experiments are a per-team opt-in of the synchronizer's cluster: the catalog's
`cross_region` gives the team a quota of internal load balancers and a NetworkPolicy that
opens only the synchronizer port, only to the peers' pod ranges, only on synchronizer pods;
runner refuses an experiment the catalog does not allow, on one line."""

from __future__ import annotations

import copy
import re

import pytest
from pydantic import ValidationError

from catalog import Cluster, load_cluster, load_peer_pod_ranges
from catalog.errors import InputError
from kustomize.tooling import objects
from runner import experiment as ex
from tests.runner.conftest import IMAGE


def ultra(**cross) -> Cluster:
    data = load_cluster("ultra-usc1").model_dump()
    data["cross_region"] = {"teams": ["research"], "peers": ["mega-euw4"], **cross}
    return Cluster.model_validate(data)


def by_kind(objs: list[dict], kind: str) -> list[dict]:
    return [o for o in objs if o["kind"] == kind]


def test_an_opted_in_team_gets_load_balancers_and_the_synchronizer_policy():
    cluster = ultra(port=6000, load_balancers=3)
    research = objects.team_objects(cluster, "research")
    quota = by_kind(research, "ResourceQuota")[0]["spec"]["hard"]
    assert quota["services.loadbalancers"] == "3" and quota["services.nodeports"] == "3"
    policy = next(o for o in by_kind(research, "NetworkPolicy")
                  if o["metadata"]["name"] == objects.SYNC_POLICY)  # fmt: skip
    mega = load_cluster("mega-euw4").network.pods_cidr
    assert policy["spec"] == {
        "podSelector": {"matchLabels": {"platform.reve.dev/learner": "synchronizer"}},
        "policyTypes": ["Ingress"],
        "ingress": [{"from": [{"ipBlock": {"cidr": mega}}],
                     "ports": [{"port": 6000, "protocol": "TCP"}]}],
    }  # fmt: skip
    team_policy = next(o for o in by_kind(research, "NetworkPolicy")
                       if o["metadata"]["name"] == objects.TEAM_POLICY)  # fmt: skip
    assert team_policy == objects.team_network_policy("research")  # unchanged


def test_other_teams_and_clusters_stay_closed():
    for cluster, team in [(ultra(), "media"), (load_cluster("mega-euw4"), "research")]:
        objs = objects.team_objects(cluster, team)
        quota = by_kind(objs, "ResourceQuota")[0]["spec"]["hard"]
        assert quota["services.loadbalancers"] == "0" and quota["services.nodeports"] == "0"
        names = [o["metadata"]["name"] for o in by_kind(objs, "NetworkPolicy")]
        assert names == [objects.TEAM_POLICY]


def test_the_policy_selects_the_pods_runner_labels_as_the_synchronizer():
    assert objects.SYNCHRONIZER_POD == {ex.LEARNER_LABEL: ex.SYNC_ROLE}


@pytest.mark.parametrize(
    ("cross", "message"),
    [
        ({"teams": ["nobody"]}, "cross_region.teams[0]: 'nobody' is not one of teams"),
        ({"peers": ["ultra-usc1"]}, "'ultra-usc1' is this cluster"),
        ({"peers": ["mega-euw4", "mega-euw4"]}, "is listed twice"),
        ({"port": 80}, "greater than or equal to 1024"),
    ],
)
def test_bad_opt_ins_are_refused(cross, message):
    with pytest.raises(ValidationError, match=re.escape(message)):
        ultra(**cross)


def test_an_unknown_peer_is_one_line_naming_the_field():
    with pytest.raises(InputError) as err:
        load_peer_pod_ranges(ultra(peers=["mars-1"]))
    assert err.value.field == "cross_region.peers[0]" and "unknown cluster 'mars-1'" in str(
        err.value.line()
    )


EXPERIMENT = {
    "name": "lm-diloco",
    "namespace": "research",
    "image": IMAGE,
    "train_config": "runs/train/tiny-lm.yaml",
    "synchronizer": {"cluster": "ultra-usc1", "host": "sync.research.example"},
    "learners": [{"name": "us", "cluster": "ultra-usc1"}, {"name": "eu", "cluster": "mega-euw4"}],
}


def check(cluster: Cluster, **changes) -> None:
    data = copy.deepcopy(EXPERIMENT)
    for key, value in changes.items():
        data[key] = value if not isinstance(value, dict) else {**data[key], **value}
    exp = ex.build_experiment(data, "runs/x.yaml")
    ex.check_cross_region(exp, cluster, exp.team or exp.namespace)


def test_runner_renders_only_what_the_catalog_opens():
    check(ultra())  # research, learners from mega-euw4, port 5555
    check(load_cluster("ultra-usc1"))  # the committed catalog opts research in
    same_cluster = [{"name": "us", "cluster": "ultra-usc1"}]
    check(load_cluster("mega-euw4"), learners=[{"name": "eu", "cluster": "mega-euw4"}])
    check(ultra(teams=["media"]), learners=same_cluster)  # no remote learner: no opt-in
    cases = [
        ({"namespace": "media"}, "synchronizer.cluster", "team 'media' is not opted in"),
        ({"synchronizer": {"port": 6000}}, "synchronizer.port", "6000: ultra-usc1 opens 5555"),
    ]
    for changes, field, message in cases:
        with pytest.raises(InputError) as err:
            check(ultra(), **changes)
        assert (err.value.source, err.value.field) == ("runs/x.yaml", field)
        assert message in err.value.message
    with pytest.raises(InputError, match=r"admits learners from \['elsewhere'\] only"):
        check(ultra(peers=["elsewhere"]))
