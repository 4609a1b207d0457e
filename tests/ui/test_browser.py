"""`runner ui` in a real headless browser (Debian's chromium, driven by Playwright with the
system browser; install it with scripts/install-browser). Screenshots are saved under the
test's tmp folder and their paths printed (`pytest -s` shows them)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from runner.ui.sources import LocalSource
from tests.ui import fill

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="no /usr/bin/chromium: run scripts/install-browser"
)


@pytest.fixture
def page(tmp_path):
    playwright = pytest.importorskip("playwright.sync_api")
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=str(CHROMIUM), headless=True, args=ARGS,
            viewport={"width": 1400, "height": 1100},
        )  # fmt: skip
        try:
            yield browser.new_page()
        finally:
            browser.close()


def shot(page, path: Path) -> None:
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")


def points(page, plot: str) -> int:
    return int(page.get_attribute(f"#{plot}", "data-points") or 0)


def test_the_page_shows_a_run_and_names_the_straggler(outputs, reader, serve, page, tmp_path):
    base = serve(LocalSource(outputs, reader=reader))
    page.goto(f"{base}#{fill.TEAM}/{fill.RUN}")
    summary = page.locator("#straggler-summary")
    summary.wait_for(timeout=60_000)
    assert f"rank {fill.SLOW_RANK} on node-1" in summary.inner_text()
    assert "straggler" in page.locator("#heatmap tr.named").inner_text()
    named = page.locator("#heatmap tr.named td.who").all_inner_texts()
    assert named and all(t == f"rank {fill.SLOW_RANK} (node-1)" for t in named)
    for plot in ("loss-plot", "step-plot", "tput-plot"):
        assert points(page, plot) == fill.STEPS, plot
    assert points(page, "rank-plot") == fill.STEPS * fill.RANKS
    assert page.locator("#loss-plot canvas").count() == 1
    assert "encoder" in page.locator("#aux [data-service=encoder]").inner_text()
    assert points(page, "queue-plot") == fill.STEPS
    assert page.locator("#members tbody tr").count() == fill.RANKS
    assert page.locator(f"#runs tr[data-run='{fill.TEAM}/{fill.RUN}']").count() == 1
    shot(page, tmp_path / "run.png")


def test_the_page_refreshes_while_a_run_writes(tmp_path, serve, page):
    folder = tmp_path / "outputs" / "research" / "live"
    folder.mkdir(parents=True)
    metrics = folder / "metrics.jsonl"

    def write(first: int, last: int) -> None:
        with metrics.open("a") as f:
            for s in range(first, last + 1):
                row = {"step": s, "loss": 3.0 / s, "step_time": 0.1, "time": time.time()}
                f.write(json.dumps(row) + "\n")

    write(1, 5)
    base = serve(LocalSource(tmp_path / "outputs"))
    page.goto(f"{base}#research/live")
    expect = pytest.importorskip("playwright.sync_api").expect
    expect(page.locator("#loss-plot")).to_have_attribute("data-points", "5", timeout=60_000)
    assert page.locator("#runs td.state-running").count() == 1
    expect(page.locator("#runs tr[data-run='research/live'] td").nth(2)).to_have_text("5")
    write(6, 12)
    expect(page.locator("#loss-plot")).to_have_attribute("data-points", "12", timeout=60_000)
    shot(page, tmp_path / "live.png")
