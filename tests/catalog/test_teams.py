"""Team names in a cluster file: namespace names, never a platform namespace, no repeats.

A team named after a platform namespace (`warden`, `observability`, ...) would get the
platform's NetworkPolicies, Secrets and service accounts mixed with its runs."""

from pathlib import Path

import pytest
import yaml

from catalog import InputError
from catalog.loader import load_cluster_file
from catalog.schema import RESERVED_NAMESPACES


def write(tmp_path: Path, teams: list[str]) -> Path:
    data = yaml.safe_load(Path("clusters/ultra-usc1/cluster.yaml").read_text())
    data["teams"] = teams
    path = tmp_path / "clusters" / "ultra-usc1" / "cluster.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    ("teams", "message"),
    [
        (["research", "warden"], "teams: [1]: 'warden' is a namespace of the platform"),
        (["kube-system"], "teams: [0]: 'kube-system' is a namespace of the platform"),
        (["Research"], "teams: [0]: 'Research' is not a namespace name"),
        (["../x"], "teams: [0]: '../x' is not a namespace name"),
        (["media", "media"], "teams: [1]: 'media' is listed twice"),
    ],
)
def test_bad_team_names_are_one_line(tmp_path, teams, message):
    with pytest.raises(InputError) as caught:
        load_cluster_file(write(tmp_path, teams), "clusters/ultra-usc1/cluster.yaml")
    line = caught.value.line()
    assert line == f"clusters/ultra-usc1/cluster.yaml: {message}" or message in line
    assert "\n" not in line


def test_platform_namespaces_are_reserved():
    namespaces = yaml.safe_load_all(Path("kustomize/bases/namespaces/namespaces.yaml").read_text())
    platform = {doc["metadata"]["name"] for doc in namespaces}
    assert platform <= RESERVED_NAMESPACES
