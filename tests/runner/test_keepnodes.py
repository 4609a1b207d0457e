"""`keep_nodes`: a RayJob asks Warden to keep its worker nodes for its namespace."""

from __future__ import annotations

import pytest

from runner import keepnodes
from runner.render import render_run
from runner.spec import build_spec, load_run
from tests.runner.test_render import pod_templates, worker


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30m", 1800), ("2h", 7200), ("1h30m", 5400), ("90s", 90), ("1h0m5s", 3605)],
)
def test_durations(text, seconds):
    assert keepnodes.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "30", "m", "1d", "30 m", "-5m", "1m1h"])
def test_bad_durations(text):
    with pytest.raises(ValueError, match="is not a duration"):
        keepnodes.parse_duration(text)


def test_keep_nodes_marks_the_workers_and_validates():
    manifests = render_run(load_run("runs/examples/tiny-lm-resume.yaml"))  # validated
    head, work = pod_templates(manifests)
    assert work["metadata"]["labels"][keepnodes.POD_LABEL] == "true"
    assert work["metadata"]["annotations"][keepnodes.POD_SECONDS] == "1800"
    assert keepnodes.POD_LABEL not in head["metadata"]["labels"]
    assert keepnodes.POD_SECONDS not in head["metadata"].get("annotations", {})


def test_without_keep_nodes_no_worker_is_marked(base):
    work = worker(render_run(build_spec(base)))
    assert keepnodes.POD_LABEL not in work["metadata"]["labels"]
    assert keepnodes.POD_SECONDS not in work["metadata"].get("annotations", {})


@pytest.mark.parametrize("kind", ["rayjob", "raycluster", "job"])
def test_every_gpu_pod_may_land_on_the_nodes_kept_for_its_namespace(base, kind):
    data = {**base, "type": kind, "namespace": "research"}
    if kind == "raycluster":
        data.pop("cmd")
    templates = pod_templates(render_run(build_spec(data)))
    gpu = [t for t in templates if t["spec"].get("tolerations")]
    assert len(gpu) == 1
    spec = gpu[0]["spec"]
    assert {**keepnodes.toleration("research"), "operator": "Equal"} in spec["tolerations"]
    preferred = spec["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert preferred == [keepnodes.preference("research")]
    for cpu in (t for t in templates if t is not gpu[0]):
        assert "affinity" not in cpu["spec"] and "tolerations" not in cpu["spec"]
