"""Every committed run definition's entrypoint composes into a valid driver config.

`runner render` cannot know the driver's config keys; this test closes the loop: the exact
arguments the rendered RayJob passes to `python -m driver.train` (cluster form) and the ones
`runner run --local` passes (local form) must compose without error.
"""

from pathlib import Path

import pytest

from driver.config import compose
from runner.spec import entrypoint, load_run

RUNS = sorted(
    path
    for path in Path("runs").rglob("*.yaml")
    if path.parts[1] not in ("train", "env") and "train_config:" in path.read_text()
)


@pytest.mark.parametrize("local", [False, True], ids=["cluster", "local"])
@pytest.mark.parametrize("path", RUNS, ids=[p.stem for p in RUNS])
def test_entrypoint_composes(path, local):
    spec = load_run(path)
    argv = entrypoint(spec, local=local)
    assert argv[:3] == ["python", "-m", "driver.train"]
    cfg, text = compose(argv[3], argv[4:])
    assert cfg.run.name == spec.name and cfg.run.team == (spec.team or spec.namespace)
    assert text


def test_there_are_driver_runs_to_check():
    assert len(RUNS) >= 3
