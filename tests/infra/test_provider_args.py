"""Every declared input is a real argument of the installed pulumi_gcp / pulumi_kubernetes.

The mocks accept anything; these tests hold each recorded input against the provider's typed
args classes (see provider_args.py) and prove the check catches the mistakes it is for.
"""

from __future__ import annotations

import copy

import pytest

from infra.mocks import run

from .provider_args import args_class, problems

NODE_POOL = "gcp:container/nodePool:NodePool"
FUTURE = "gcp:compute/futureReservation:FutureReservation"


def test_every_declared_input_is_a_provider_argument(program):
    found = [p for r in program.resources for p in problems(r)]
    assert found == []


def test_every_resource_type_is_checked(programs):
    """Only the GKE multi-network and Argo CD custom resources have no args class."""
    types = {r.type for p in programs.values() for r in p.resources if r.custom}
    unchecked = {t for t in types if args_class(t) is None}
    assert unchecked == {
        "kubernetes:networking.gke.io/v1:GKENetworkParamSet",
        "kubernetes:networking.gke.io/v1:Network",
        "kubernetes:argoproj.io/v1alpha1:Application",
    }
    assert {NODE_POOL, FUTURE, "kubernetes:helm.sh/v3:Release"} <= types


def mutated(program, type_, change):
    """Problems of a copy of the first GPU pool / future reservation after `change`."""
    [original] = [r for r in program.of_type(type_) if "h200-main" in r.name]
    resource = copy.deepcopy(original)
    change(resource.inputs)
    return problems(resource)


@pytest.mark.parametrize(
    ("type_", "change", "expected"),
    [
        (
            NODE_POOL,
            lambda i: i["nodeConfig"].update(reservationAfinity={}),
            "nodeConfig.reservationAfinity: not an argument of NodePoolNodeConfigArgs",
        ),
        (
            NODE_POOL,
            lambda i: i["networkConfig"].update(additionalNodeNetworkConfigs={"network": "x"}),
            "networkConfig.additionalNodeNetworkConfigs: expected a list",
        ),
        (NODE_POOL, lambda i: i.update(nodeLocations="zone-a"), "nodeLocations: expected a list"),
        (
            NODE_POOL,
            lambda i: i["nodeConfig"].update(gvnic=True),
            "nodeConfig.gvnic: expected an object (NodePoolNodeConfigGvnicArgs)",
        ),
        (
            NODE_POOL,
            lambda i: i["nodeConfig"]["guestAccelerators"][0].update(count="8"),
            "guestAccelerators[0].count: expected a number",
        ),
        (
            NODE_POOL,
            lambda i: i["nodeConfig"].update(hostMaintenancePolicy={"maintenanceInterval": "X"}),
            "maintenanceInterval: 'X' is not one of",
        ),
        (NODE_POOL, lambda i: i.pop("cluster"), "h200-main: cluster: required by NodePoolArgs"),
        (
            FUTURE,
            lambda i: i["timeWindow"].pop("startTime"),
            "timeWindow.startTime: required by FutureReservationTimeWindowArgs",
        ),
        (FUTURE, lambda i: i.update(planningStatus="DONE"), "'DONE' is not one of"),
    ],
)
def test_check_catches_wrong_inputs(programs, type_, change, expected):
    found = mutated(programs["ultra-usc1"], type_, change)
    assert len(found) == 1 and expected in found[0], found


def test_a_snake_case_typo_in_the_program_reaches_the_check(monkeypatch):
    """A wrong nested key passes Pulumi's SDK untranslated; the check names it."""
    from infra.components import nodepools

    capacity = nodepools.NodePools._capacity

    def typo(self, pool):
        out = capacity(self, pool)
        out["reservation_afinity"] = out.pop("reservation_affinity")
        return out

    monkeypatch.setattr(nodepools.NodePools, "_capacity", typo)
    program = run("mega-euw4")
    found = [p for r in program.of_type(NODE_POOL) for p in problems(r)]
    assert len(found) == 2
    assert all("nodeConfig.reservation_afinity: not an argument of" in p for p in found)
