"""Digests CI pushed are written into the image list and the run definitions (on copies),
and an image the runs use must be pinned by the same digest in the image list."""

from __future__ import annotations

import shutil

import pytest

from catalog import load_cluster
from catalog.errors import InputError
from catalog.images import cluster_images, digest_problems, load_entries, unbuilt_entry
from kustomize.tooling import pin_images, validate
from tests.kustomize.conftest import ROOT

A = "sha256:" + "a" * 64
B = "sha256:" + "b" * 64


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """A copy of the catalogs, the image list and the run examples."""
    for rel in ("clusters", "catalog", "runs/examples", "kustomize/images.yaml"):
        src, dst = ROOT / rel, tmp_path / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dst)
    monkeypatch.setenv("PLATFORM_ROOT", str(tmp_path))
    return tmp_path


def test_registries_are_every_clusters(tree, capsys):
    assert pin_images.main(["registries"]) == 0
    assert capsys.readouterr().out.split() == [
        "europe-docker.pkg.dev/reve-train-mega/training",
        "us-docker.pkg.dev/reve-train-ultra/training",
    ]


def test_write_pins_the_list_and_every_run(tree, capsys):
    before = (tree / "kustomize/images.yaml").read_text()
    args = ["write", "--digest", f"trainer={A}", "--digest", f"preflight={B}", "--tag", "2026.12.0"]
    assert pin_images.main(args) == 0
    out = capsys.readouterr().out
    assert "pinned kustomize/images.yaml" in out and "pinned runs/examples/tiny-lm.yaml" in out
    after = (tree / "kustomize/images.yaml").read_text()
    assert f'"{{registry}}/trainer:2026.12.0@{A}"' in after
    assert f'"{{registry}}/preflight:2026.12.0@{B}"' in after
    # only the two image lines changed, and their `unbuilt: true` went: comments and order
    # are kept
    kept = [line for line in before.splitlines() if line.strip() != "unbuilt: true"]
    pairs = zip(kept, after.splitlines(), strict=True)
    assert len([a for a, b in pairs if a != b]) == 2
    assert "unbuilt" not in after.split("images:", 1)[1]
    assert all(not e.get("unbuilt") for e in load_entries(tree))
    entries = load_entries(tree)
    for name in ("ultra-usc1", "mega-euw4"):
        refs = [line.split("image: ", 1)[1] for run in (tree / "runs/examples").glob("*.yaml")
                for line in run.read_text().splitlines() if line.startswith("image: ")]  # fmt: skip
        assert digest_problems(load_cluster(name, tree), entries, refs) == []
    assert all(A in line for run in (tree / "runs/examples").glob("*.yaml")
               for line in run.read_text().splitlines() if line.startswith("image: "))  # fmt: skip
    assert pin_images.main(args) == 0 and capsys.readouterr().out == ""  # idempotent


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--digest", "trainer=sha256:abc"], "--digest: trainer: 'sha256:abc' is not sha256:"),
        (["--digest", f"ray={A}"], "--digest: ray: no {registry}/ entry 'ray' in kustomize/"),
    ],
)
def test_bad_digests_are_one_line(tree, capsys, args, line):
    assert pin_images.main(["write", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: " + line) and err.count("\n") == 1


def test_the_cached_trainer_and_the_runs_use_one_digest():
    """The committed state: every run's trainer is the image-cache's trainer."""
    entries = load_entries(ROOT)
    for name in ("ultra-usc1", "mega-euw4"):
        for rel, objects in validate.app_objects(ROOT, name).items():
            refs = [c["image"] for o in objects for c in validate.checks.containers(o)]
            assert digest_problems(load_cluster(name), entries, refs) == [], rel


def test_an_image_built_here_is_pinned_by_digest_or_marked_unbuilt(tree):
    images = tree / "kustomize/images.yaml"
    text = images.read_text()
    images.write_text(text.replace("    unbuilt: true\n", "", 1))  # the trainer's
    with pytest.raises(InputError, match=r"images\[0\].image: '\{registry\}/trainer:2026.11.0' "
                       "is built here but not pinned by digest"):  # fmt: skip
        load_entries(tree)
    images.write_text(text.replace('trainer:2026.11.0"', f'trainer:2026.11.0@{A}"'))
    with pytest.raises(InputError, match="is marked unbuilt: only an image built here, without"):
        load_entries(tree)


def test_a_run_with_another_digest_than_the_pinned_one_fails(tree):
    assert pin_images.main(["write", "--digest", f"trainer={A}"]) == 0
    run = "us-docker.pkg.dev/reve-train-ultra/training/trainer@" + B
    [problem] = digest_problems(load_cluster("ultra-usc1", tree), load_entries(tree), [run])
    assert "differs from the cached trainer image" in problem


def test_an_image_not_built_yet_is_not_cached_nor_held_against_runs():
    """Until the images workflow pushed the trainer, no GPU node pulls it, and a run's
    trainer reference is said to be unbuilt by runner render instead (runner.unbuilt)."""
    entries = load_entries(ROOT)
    cluster = load_cluster("ultra-usc1")
    [trainer] = [i for i in cluster_images(cluster, entries) if i.name == "trainer"]
    assert trainer.unbuilt and "@sha256:" not in trainer.image
    tag = "us-docker.pkg.dev/reve-train-ultra/training/trainer:2026.11.0"
    assert unbuilt_entry(cluster, entries, tag) == "trainer"
    assert unbuilt_entry(cluster, entries, tag.replace(":2026.11.0", "@" + A)) is None
    assert digest_problems(cluster, entries, [tag]) == []
    cache = (ROOT / "kustomize/overlays/ultra-usc1/generated/image-cache.yaml").read_text()
    assert "/trainer:" not in cache and "/preflight:" not in cache
