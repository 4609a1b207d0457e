"""The driver's first lines: where the composed config went (not all of it), and a cluster
run without its checkpoint key refused before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from driver.config.compose import compose
from driver.train import SHOW_CONFIG, config_text, main
from tests.driver.conftest import TINY_LM


@pytest.fixture
def composed(tmp_path):
    cfg, text = compose(TINY_LM, [f"run.output_dir={tmp_path}"])
    return cfg, text, Path(tmp_path)


def test_a_local_run_says_where_the_config_is(composed):
    cfg, text, out = composed
    said = config_text(cfg, text, out, "progress", show=False)
    assert said == f"config: {out / 'config.yaml'} (--show-config prints it)\n"
    assert config_text(cfg, text, out, "progress", show=True) == text
    assert config_text(cfg, text, out, "json", show=False).count("\n") == 1  # one JSON line


@pytest.mark.parametrize("where", [["run.address=auto"], []])
def test_a_cluster_run_without_its_checkpoint_key_is_refused(tmp_path, monkeypatch, capsys, where):
    monkeypatch.delenv("REVE_CHECKPOINT_KEY", raising=False)
    if not where:
        monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")  # what a RayJob's entrypoint gets
    code = main([TINY_LM, *where, f"run.output_dir={tmp_path / 'out'}", SHOW_CONFIG])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: {TINY_LM}: run.address: a cluster run needs REVE_CHECKPOINT_KEY")
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_runner_run_passes_show_config_to_the_driver(capsys):
    from runner.cli import main as runner

    example = Path(TINY_LM).parents[1] / "examples" / "tiny-lm.yaml"
    with pytest.raises(SystemExit) as done:
        runner(["run", "--local", str(example), "--show-config", "--dry-run"])
    assert done.value.code == 0
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(f" {SHOW_CONFIG}")


def test_the_checks_before_ray_load_no_torch_for_a_learner(tmp_path):
    import subprocess
    import sys

    from driver.diloco import keys

    keys.generate(tmp_path / "keys", ["a"])
    words = ["diloco.address=tcp://127.0.0.1:1", "diloco.learner=a", f"diloco.keys={tmp_path}/keys"]
    code = (
        "import sys, driver.train as t; from driver.config.compose import compose; "
        f"cfg = compose({TINY_LM!r}, {words!r})[0]; t.check_diloco(cfg); "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr


def test_bad_diloco_settings_still_stop_the_driver(tmp_path, capsys):
    learner = ["diloco.address=tcp://127.0.0.1:1", "diloco.learner=a", "diloco.sync_every=ten"]
    assert main([TINY_LM, f"run.output_dir={tmp_path / 'out'}", *learner]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "diloco.sync_every" in err, err
