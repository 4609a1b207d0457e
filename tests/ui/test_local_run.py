"""A real local run (the driver, two gloo workers on an embedded Ray) followed live by the
page in a headless browser, until it finishes. Slow: `pytest -m slow tests/ui`."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runner.ui.sources import LocalSource
from tests.ui.test_browser import CHROMIUM, page, points, shot  # noqa: F401 (fixture)

ROOT = Path(__file__).resolve().parents[2]
STEPS = 250
"""Long enough that the page, which asks every 3 s for rows the driver writes every 2 s,
draws the run while it trains (an 80-step run on an idle machine trained in about 4 s,
and the page went from 0 points to all of them), and below the page's 300 points, so one
point is one step."""


@pytest.mark.slow
@pytest.mark.skipif(
    not CHROMIUM.exists(), reason="no /usr/bin/chromium: run scripts/install-browser"
)
def test_the_page_follows_a_local_run(tmp_path, serve, page):  # noqa: F811
    outputs = tmp_path / "outputs"
    args = ["runs/train/tiny-lm.yaml", f"train.steps={STEPS}", "optimizer.warmup_steps=2"]
    args += ["data.size=1024", "logging.format=json", "run.name=tiny-lm", "run.team=research"]
    args += [f"run.output_dir={outputs}/research/tiny-lm", f"checkpoint.root={tmp_path}/ckpt"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "driver.train", *args], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        base = serve(LocalSource(outputs))
        seen, deadline = [], time.monotonic() + 300
        page.goto(f"{base}#research/tiny-lm")
        while proc.poll() is None and time.monotonic() < deadline:
            if page.locator("#loss-plot").count():
                seen.append(points(page, "loss-plot"))
            time.sleep(1)
        assert proc.wait(timeout=60) == 0
        expect = pytest.importorskip("playwright.sync_api").expect
        expect(page.locator("#run-facts")).to_contain_text("finished", timeout=30_000)
        expect(page.locator("#loss-plot")).to_have_attribute("data-points", str(STEPS))
        assert any(0 < n < STEPS for n in seen), seen  # drawn while it trained
        shot(page, tmp_path / "local-run.png")
    finally:
        proc.kill()
        proc.wait()
