"""An image the catalog says is not built yet (kustomize/images.yaml `unbuilt: true`): a
cluster run using it renders with a `# WARNING:` line in its apps/ file, `render`,
`validate` and `submit` say so on one line, `submit --apply` refuses it, a local run is
unaffected; any other tag stays refused, a digest (an image built elsewhere) is fine."""

from __future__ import annotations

import shutil

import pytest

from catalog import exitcodes
from tests.runner.conftest import ROOT, write_run
from tests.runner.test_cli import run_cli

TAG = "us-docker.pkg.dev/reve-train-ultra/training/trainer:2026.11.0"
NOTICE = ("image: trainer is not built yet (kustomize/images.yaml: unbuilt): its pods cannot "
          "start until the images workflow pushes it")  # fmt: skip


@pytest.fixture
def examples(monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("PLATFORM_ROOT", str(ROOT))


@pytest.mark.parametrize(
    "command",
    [["validate"], ["render", "--dry-run"], ["submit", "--dry-run", "-f"]],
    ids=["validate", "render", "submit"],
)
def test_a_cluster_run_of_an_unbuilt_image_says_so_on_one_line(examples, capsys, command):
    code, _, err = run_cli([*command, "runs/examples/tiny-lm.yaml"], capsys)
    assert code == exitcodes.OK
    assert err == f"warning: runs/examples/tiny-lm.yaml: {NOTICE}\n"


def test_its_apps_file_carries_the_warning(examples, capsys):
    code, out, _ = run_cli(["render", "runs/examples/tiny-lm.yaml", "-o", "-"], capsys)
    assert code == exitcodes.OK
    assert f"# WARNING: runs/examples/tiny-lm.yaml: {NOTICE}\n---\n" in out
    committed = (ROOT / "apps/ultra-usc1/research/tiny-lm.yaml").read_text()
    assert f"# WARNING: runs/examples/tiny-lm.yaml: {NOTICE}\n" in committed


def test_apply_refuses_it(examples, capsys):
    code, _, err = run_cli(["submit", "-f", "runs/examples/tiny-lm.yaml", "--apply"], capsys)
    assert code == exitcodes.USAGE
    assert err == f"error: command line: --apply: refused: runs/examples/tiny-lm.yaml: {NOTICE}\n"


def test_an_experiment_names_the_learner_whose_image_it_is(examples, capsys):
    code, _, err = run_cli(["validate", "runs/examples/diloco-two-regions.yaml"], capsys)
    assert code == exitcodes.OK
    assert err.splitlines() == [
        f"warning: runs/examples/diloco-two-regions.yaml: {NOTICE}",
        f"warning: runs/examples/diloco-two-regions.yaml: learners[1].{NOTICE}",
    ]


def test_a_local_run_is_unaffected(examples, capsys):
    code, _, err = run_cli(["run", "--local", "runs/examples/tiny-lm.yaml", "--dry-run"], capsys)
    assert code == exitcodes.OK and "warning" not in err


def test_other_tags_stay_refused_and_a_digest_is_fine(repo, base, capsys):
    (repo / "kustomize").mkdir()
    shutil.copy(ROOT / "kustomize/images.yaml", repo / "kustomize/images.yaml")
    path = write_run(repo / "runs", {**base, "image": TAG})
    assert run_cli(["validate", str(path)], capsys)[0] == exitcodes.OK  # the unbuilt trainer
    path = write_run(repo / "runs", {**base, "image": TAG.replace("trainer", "other")})
    code, _, err = run_cli(["validate", str(path)], capsys)
    assert code == exitcodes.USAGE and "is not pinned by digest" in err
    built = TAG.replace(":2026.11.0", "@sha256:" + "c" * 64)  # built and pushed elsewhere
    path = write_run(repo / "runs", {**base, "image": built})
    code, _, err = run_cli(["validate", str(path)], capsys)
    assert (code, err) == (exitcodes.OK, "")
