"""Bad cluster definitions fail with one line before any resource is declared."""

from __future__ import annotations

import pulumi
import pytest
import yaml

from catalog import InputError, load_cluster
from infra import plan
from infra.mocks import ProgramRun, run


def write_cluster(root, name: str, change, base: str = "ultra-usc1") -> None:
    data = load_cluster(base).model_dump(mode="json", exclude_none=True)
    data["name"] = name
    change(data)
    folder = root / "clusters" / name
    folder.mkdir(parents=True)
    (folder / "cluster.yaml").write_text(yaml.safe_dump(data))


def unknown_accelerator(d):
    d["gpu_pools"][0]["accelerator"] = "B300"


def reservation_missing(d):
    del d["gpu_pools"][0]["reservation"]


def overlapping_cidrs(d):
    d["network"]["pods_cidr"] = "10.0.0.0/14"


def gpu_cidr_too_small(d):
    d["network"]["gpu_cidr"] = "192.168.0.0/24"


def rdma_pools_in_two_zones(d):
    d["zones"].append("us-central1-c")
    d["gpu_pools"][1]["zone"] = "us-central1-c"


def bad_future_window(d):
    d["gpu_pools"][0]["reservation"]["future"]["end_time"] = "2026-01-01T00:00:00Z"


def long_team(d):
    d["teams"].append("computer-vision-xl")


CASES = [
    ("bad-accel", unknown_accelerator, "gpu_pools[0].accelerator", "unknown accelerator 'B300'"),
    ("no-res", reservation_missing, "gpu_pools[0].reservation", "required for a non-spot"),
    ("overlap", overlapping_cidrs, "network", "overlaps"),
    ("small-gpu", gpu_cidr_too_small, "network.gpu_cidr", "addresses per subnet for 136 GPU nodes"),
    ("two-zones", rdma_pools_in_two_zones, "gpu_pools[1].zone", "must share one zone"),
    ("window", bad_future_window, "gpu_pools[0].reservation.future", "end_time must be after"),
    ("a-cluster-name-too-long", lambda d: None, "name", "at most 16 characters"),
    ("long-team", long_team, "teams[2]", "'computer-vision-xl': at most 15 characters"),
]


@pytest.mark.parametrize(("name", "change", "field", "message"), CASES, ids=[c[0] for c in CASES])
def test_bad_cluster_fails_before_any_resource(tmp_path, name, change, field, message):
    write_cluster(tmp_path, name, change)
    record = ProgramRun()
    with pytest.raises(InputError) as err:
        run(name, root=tmp_path, record=record)
    line = err.value.line()
    assert "\n" not in line
    assert f"clusters/{name}/cluster.yaml: {field}" in line
    assert message in line
    assert record.resources == []


@pytest.mark.parametrize(
    ("name", "change", "field", "message"), CASES[:3], ids=[c[0] for c in CASES[:3]]
)
def test_plan_entry_point_prints_one_line_and_exits_2(
    tmp_path, monkeypatch, capsys, name, change, field, message
):
    write_cluster(tmp_path, name, change)
    monkeypatch.setenv("PLATFORM_ROOT", str(tmp_path))
    assert plan.main([name]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and field in err and message in err


def test_unknown_stack_names_the_known_clusters(capsys):
    assert plan.main(["no-such-cluster"]) == 2
    err = capsys.readouterr().err
    assert err == "stack: unknown cluster 'no-such-cluster' (known: mega-euw4, ultra-usc1)\n"


def test_pulumi_entry_point_turns_input_error_into_run_error(monkeypatch):
    """Under the Pulumi CLI a bad stack ends as a RunError: one line, no traceback."""
    from infra import program

    monkeypatch.setattr(pulumi, "get_stack", lambda: "no-such-cluster")
    with pytest.raises(pulumi.RunError) as err:
        program.main()
    assert (
        str(err.value) == "stack: unknown cluster 'no-such-cluster' (known: mega-euw4, ultra-usc1)"
    )


def test_pulumi_entry_point_names_the_stack_file_for_a_bad_setting(monkeypatch):
    from infra import program, settings

    monkeypatch.setattr(pulumi, "get_stack", lambda: "ultra-usc1")
    values = {**settings.project_defaults(), "reve-infra:awaitingDelivery": '["h200-x"]'}
    pulumi.runtime.set_all_config(values)
    try:
        with pytest.raises(pulumi.RunError) as err:
            program.main()
    finally:
        pulumi.runtime.set_all_config(settings.project_defaults())
    assert str(err.value) == (
        "infra/Pulumi.ultra-usc1.yaml: awaitingDelivery: 'h200-x' is not a reserved GPU pool "
        "of ultra-usc1 (known: h200-main)"
    )


@pytest.mark.parametrize(
    ("version", "gke", "message"),
    [
        ("1.32", "1.32.2-gke.1182000", "gke_version: 1.32.2-gke.1182000 is below 1.32.11-gke."),
        ("1.32", None, "kubernetes_version: minor 1.32 alone does not guarantee 1.32.11-gke."),
        ("1.27", None, "kubernetes_version: 1.27 is older than 1.28"),
    ],
)
def test_cluster_below_the_accelerator_version_floor_is_refused(tmp_path, version, gke, message):
    def change(d):
        d["kubernetes_version"] = version
        d.pop("gke_version", None)
        if gke:
            d["gke_version"] = gke

    write_cluster(tmp_path, "old-mega", change, base="mega-euw4")
    record = ProgramRun()
    with pytest.raises(InputError) as err:
        run("old-mega", root=tmp_path, record=record)
    line = err.value.line()
    assert line.startswith("clusters/old-mega/cluster.yaml: ") or "/old-mega/" in line
    assert message in line and "the floor for H100" in line and "\n" not in line
    assert record.resources == []
