"""Golden files: every committed run definition renders exactly to its file in apps/.

The apps/ files are the goldens (they are what ArgoCD applies). Regenerate them with
`scripts/regen-goldens` after a template or catalog change and review the diff.
"""

from __future__ import annotations

import pytest

from runner import gitops
from runner.commands.render import apps_text, check_apps
from runner.experiment import is_experiment_file
from runner.render import RAY_VERSION, render
from runner.spec import load_run
from tests.runner.conftest import ROOT

EXAMPLES = sorted(  # experiments: tests/runner/test_experiment_cli.py
    p.name for p in (ROOT / "runs" / "examples").glob("*.yaml") if not is_experiment_file(p)
)


def test_examples_exist():
    assert {
        "tiny-lm.yaml",
        "tiny-dit.yaml",
        "dev-cluster.yaml",
        "eval-server.yaml",
        "tiny-lm-spot.yaml",
        "tiny-lm-resume.yaml",
    } <= set(EXAMPLES)


@pytest.mark.parametrize("example", EXAMPLES)
def test_example_matches_its_golden(example):
    rendered = render(load_run(ROOT / "runs" / "examples" / example))
    spec = rendered.plan.spec
    golden = gitops.apps_path(spec.cluster, spec.namespace, spec.name, ROOT)
    assert golden.is_file(), f"missing golden {golden}; run scripts/regen-goldens"
    assert apps_text(rendered) == golden.read_text(), "run scripts/regen-goldens and review"


def test_every_committed_run_matches_apps():
    assert [d.path for d in check_apps()] == []


def test_ray_version_matches_the_installed_ray():
    from importlib.metadata import version

    assert version("ray") == RAY_VERSION
