"""The generated per-cluster YAML is up to date, and the rules that generate it."""

from __future__ import annotations

import shutil

import pytest

from catalog import InputError, load_cluster
from kustomize.tooling import generate, images, kueue, platform_objects
from tests.kustomize.conftest import ROOT


def test_generated_files_are_up_to_date():
    assert generate.stale_files(ROOT) == []


def test_check_mode_names_a_stale_file(tmp_path, capsys, monkeypatch):
    for folder in ("kustomize", "clusters"):
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("*.pyc"))
    target = tmp_path / "kustomize/overlays/ultra-usc1/generated/teams.yaml"
    target.write_text(target.read_text() + "# edited by hand\n")
    monkeypatch.setenv("PLATFORM_ROOT", str(tmp_path))
    assert generate.main(["--check"]) == 1
    assert "stale: kustomize/overlays/ultra-usc1/generated/teams.yaml" in capsys.readouterr().out
    assert generate.main([]) == 0
    assert generate.main(["--check"]) == 0


@pytest.mark.parametrize(
    "total, teams, shares",
    [(10, 2, [5, 5]), (11, 2, [6, 5]), (7, 3, [3, 2, 2]), (0, 2, [0, 0]), (1, 3, [1, 0, 0])],
)
def test_even_shares_add_up(total, teams, shares):
    got = [kueue._share(total, teams, i) for i in range(teams)]
    assert got == shares and sum(got) == total


def test_admit_all_queue_has_unbounded_quota_for_every_flavor():
    cluster = load_cluster("mega-euw4")
    queue = kueue.admit_all_queue(cluster)
    flavors = queue["spec"]["resourceGroups"][0]["flavors"]
    assert [f["name"] for f in flavors] == ["cpu", "h100"]
    cpu_gpus = next(r for r in flavors[0]["resources"] if r["name"] == "nvidia.com/gpu")
    assert cpu_gpus["nominalQuota"] == "0"
    for resource in flavors[1]["resources"]:
        assert resource["nominalQuota"] == kueue.UNBOUNDED[resource["name"]]


def test_gpu_capacity_sums_pools():
    assert kueue.gpu_capacity(load_cluster("mega-euw4"), "H100") == (64 + 32) * 8
    assert kueue.gpu_capacity(load_cluster("ultra-usc1"), "H200") == (128 + 8) * 8


@pytest.mark.parametrize(
    "ref, problem",
    [
        ("busybox:1.37.0", None),
        ("repo/x@sha256:" + "0" * 64, None),
        ("repo/x:1.2@sha256:" + "0" * 64, None),
        ("host:5000/repo/x:2.0.1", None),
        ("busybox", "has no tag or digest"),
        ("host:5000/repo/x", "has no tag or digest"),
        ("busybox:latest", "tag 'latest' is not a release version"),
        ("busybox:stable", "tag 'stable' is not a release version"),
        ("x:release-0.19", "tag 'release-0.19' is not a release version"),
    ],
)
def test_image_problem(ref, problem):
    assert images.image_problem(ref) == problem


def test_registry_placeholder_and_cluster_filter_expand():
    cluster = load_cluster("ultra-usc1")
    entries = [
        {"name": "a", "image": "{registry}/a:1.0"},
        {"name": "b", "image": "b:2.0", "clusters": ["mega-euw4"]},
    ]
    got = images.cluster_images(cluster, entries)
    assert got == [images.CachedImage("a", "us-docker.pkg.dev/reve-train-ultra/training/a:1.0")]


def test_sidecar_images_come_from_the_catalog():
    got = images.cluster_images(load_cluster("mega-euw4"), [])
    assert [i.name for i in got] == ["tcpxo-daemon"]


@pytest.mark.parametrize(
    "text, field",
    [
        ("images: {}\n", "images"),
        ("images:\n  - {name: a}\n", "images[0].image"),
        ("images:\n  - {name: a, image: 'x:latest'}\n", "images[0].image"),
        ("images:\n  - {name: A_b, image: 'x:1.0'}\n", "images[0].name"),
        (
            "images:\n  - {name: a, image: 'x:1.0'}\n  - {name: a, image: 'y:1.0'}\n",
            "images[1].name",
        ),
        ("images:\n  - {name: a, image: 'x:1.0', tag: 1}\n", "images[0]"),
    ],
)
def test_bad_image_list_names_file_and_field(tmp_path, text, field):
    (tmp_path / "kustomize").mkdir()
    (tmp_path / images.IMAGES_FILE).write_text(text)
    with pytest.raises(InputError) as err:
        images.load_entries(tmp_path)
    assert err.value.source == images.IMAGES_FILE
    assert err.value.field == field


def test_warden_job_images_must_be_in_the_list():
    cluster = load_cluster("mega-euw4")
    with pytest.raises(InputError) as err:
        platform_objects.warden_patch(cluster, [{"name": "preflight", "image": "{registry}/p:1.0"}])
    assert (err.value.source, err.value.field) == (images.IMAGES_FILE, "images")
    assert "'dcgm-diag'" in err.value.message
