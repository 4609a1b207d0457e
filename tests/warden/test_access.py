"""warden.access: who the gateway's caller is, and which requests it may make (pure)."""

from __future__ import annotations

import pytest

from warden.access import Caller, Refusal, ShrinkBody, bearer, caller, check_shrink, group_index

SA = frozenset({"training"})


def review(username: str, audiences=("warden",), ok=True, error="") -> dict:
    return {"authenticated": ok, "audiences": list(audiences), "error": error,
            "user": {"username": username}}  # fmt: skip


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (review("system:serviceaccount:research:training"), Caller("research", "training")),
        (review("x", ok=False, error="expired"), (401, "token not accepted: expired")),
        (review("system:serviceaccount:research:training", ()), (401, "not issued for")),
        (review("alice@example.com"), (403, "alice@example.com is not a service account")),
        (review("system:serviceaccount:research"), (403, "is not a service account")),
        (review("system:serviceaccount:research:default"), (403, "research/default may not")),
        ({}, (401, "token not accepted: not authenticated")),
    ],
)
def test_caller_from_a_token_review(status, expected):
    if isinstance(expected, Caller):
        assert caller(status, "warden", SA) == expected
        return
    with pytest.raises(Refusal) as err:
        caller(status, "warden", SA)
    assert err.value.status == expected[0] and expected[1] in err.value.reason


@pytest.mark.parametrize("header", [None, "", "Basic abc", "Bearer ", "bearer"])
def test_bearer_refuses_a_missing_token(header):
    with pytest.raises(Refusal, match="no bearer token"):
        bearer(header)


def test_bearer_takes_the_token():
    assert bearer("Bearer abc.def") == "abc.def"


WHO = Caller("research", "training")


@pytest.mark.parametrize(
    ("fields", "status"),
    [({}, None), ({"namespace": "research"}, None), ({"namespace": "other"}, 403),
     ({"replicas_to": 4}, 400), ({"replicas_to": 9}, 400), ({"replicas_to": 0}, None)],
)  # fmt: skip
def test_check_shrink(fields, status):
    body = ShrinkBody(**{"raycluster": "lm", "worker_group": "h200", "replicas_from": 4,
                         "replicas_to": 3, **fields})  # fmt: skip
    if status is None:
        check_shrink(body, WHO)
        return
    with pytest.raises(Refusal) as err:
        check_shrink(body, WHO)
    assert err.value.status == status


def test_group_index():
    groups = [{"groupName": "aux"}, {"groupName": "h200"}]
    cluster = {"metadata": {"namespace": "research", "name": "lm"}}
    cluster["spec"] = {"workerGroupSpecs": groups}
    assert group_index(cluster, "h200") == 1
    with pytest.raises(Refusal, match=r"research/lm has no worker group cpu \(has: \['aux',"):
        group_index(cluster, "cpu")


GOOD_FINDING = {"rank": 3, "node": "gke-a-1", "pod": "lm-worker-1", "persistent": True,
                "straggler_windows": 9, "windows": 10, "delay_us": 2.5e4,
                "since": "2026-12-01 14:19:00", "until": "2026-12-01T14:24:00Z"}  # fmt: skip


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({}, None),
        ({"pod": "lm\nforged line"}, "findings.0.pod: String should match pattern"),
        ({"since": "x\ny"}, "findings.0.since: String should match pattern"),
        ({"node": "../etc"}, "findings.0.node: String should match pattern"),
        ({"rank": -1}, "findings.0.rank: Input should be greater than or equal to 0"),
        ({"persistent": 1}, "findings.0.persistent: Input should be a valid boolean"),
        ({"extra": 1}, "findings.0.extra: Extra inputs are not permitted"),
    ],
)
def test_straggler_findings_are_strict(change, error):
    import json

    from warden.access import StragglersBody, parse

    raw = json.dumps({"findings": [{**GOOD_FINDING, **change}]}).encode()
    if error is None:
        assert parse(StragglersBody, raw).findings[0].node == "gke-a-1"
        return
    with pytest.raises(Refusal) as err:
        parse(StragglersBody, raw)
    assert err.value.status == 400 and err.value.reason.startswith(error), err.value.reason
