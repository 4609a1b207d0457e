"""Every committed run definition's entrypoint composes into a valid driver config.

`runner render` cannot know the driver's config keys; this test closes the loop: the exact
arguments the rendered RayJob passes to `python -m driver.train` (cluster form) and the ones
`runner run --local` passes (local form) must compose without error.
"""

from pathlib import Path

import pytest

from driver.config.compose import compose
from runner.experiment import is_experiment_file, learner_data, load_experiment
from runner.spec import build_spec, entrypoint, load_run

RUNS = sorted(
    path
    for path in Path("runs").rglob("*.yaml")
    if path.parts[1] not in ("train", "env") and "train_config:" in path.read_text()
)


def specs(path: Path) -> list:
    """The runs a file defines: itself, or each learner of an experiment."""
    if not is_experiment_file(path):
        return [load_run(path)]
    exp = load_experiment(path)
    return [build_spec(learner_data(exp, learner), str(path)) for learner in exp.learners]


@pytest.mark.parametrize("local", [False, True], ids=["cluster", "local"])
@pytest.mark.parametrize("path", RUNS, ids=[p.stem for p in RUNS])
def test_entrypoint_composes(path, local):
    for spec in specs(path):
        argv = entrypoint(spec, local=local)
        assert argv[:3] == ["python", "-m", "driver.train"]
        cfg, text = compose(argv[3], argv[4:])
        assert cfg.run.name == spec.name and cfg.run.team == (spec.team or spec.namespace)
        assert text


def test_there_are_driver_runs_to_check():
    assert len(RUNS) >= 3
