"""The post-mortem in a real headless browser (as tests/ui/test_browser.py): a failed
run's log view opens at the failure, filters by rank, the failure's analysis names the
rank that hung, the runs list keeps the failed run with its bundle, and a DiLoCo
experiment's learners are listed under the experiment. Screenshots under the test's tmp
folder (`pytest -s` prints their paths)."""

from __future__ import annotations

import pytest

from runner.ui.sources import LocalSource
from tests.ui import postmortem, test_browser
from tests.ui.test_browser import shot

page = test_browser.page  # the same browser fixture


@pytest.fixture(scope="module")
def folders(tmp_path_factory, reader):
    root = tmp_path_factory.mktemp("postmortem")
    postmortem.fill(root, reader)
    return root


def test_the_log_view_opens_at_the_failure_and_filters_by_rank(
    folders, reader, serve, page, tmp_path
):
    base = serve(LocalSource(folders, reader=reader))
    page.goto(f"{base}#{postmortem.TEAM}/{postmortem.FAILED}")
    where = page.locator("#log-where")
    where.filter(has_text="at the failure").wait_for(timeout=60_000)
    assert "rank 0" in where.inner_text() and "Timed out" in where.inner_text()
    rows = page.locator("#logs tbody tr")
    assert rows.count() > 0
    assert set(
        page.locator("#logs tbody tr").evaluate_all("rows => rows.map(r => r.dataset.rank)")
    ) == {"0"}
    assert "rank 0 failed" in page.locator("#logs tbody tr.ERROR").last.inner_text()
    shot(page, tmp_path / "logs-at-failure.png")
    page.select_option("#log-filters select[name=rank]", "1")
    page.click("#log-filters button[type=submit]")
    page.wait_for_function(
        "() => [...document.querySelectorAll('#logs tbody tr')].every(r => r.dataset.rank === '1')"
    )
    assert "step 4 loss" in page.locator("#logs tbody").inner_text()
    page.select_option("#log-filters select[name=level]", "ERROR,CRITICAL")
    page.select_option("#log-filters select[name=rank]", "")
    page.click("#log-newest")
    page.wait_for_function(
        "() => document.querySelectorAll('#logs tbody tr.ERROR').length > 0 "
        "&& [...document.querySelectorAll('#logs tbody tr')]"
        ".every(r => r.classList.contains('ERROR'))"
    )
    shot(page, tmp_path / "logs-errors.png")


def test_the_failure_analysis_names_the_rank_that_hung(folders, reader, serve, page, tmp_path):
    base = serve(LocalSource(folders, reader=reader))
    page.goto(f"{base}#{postmortem.TEAM}/{postmortem.FAILED}")
    page.locator("#postmortem").wait_for(state="visible", timeout=60_000)
    assert "crash-" in page.locator("#bundles").inner_text()
    page.click("#analyse")
    verdict = page.locator("#verdict")
    verdict.filter(has_text="culprits").wait_for(timeout=60_000)
    text = verdict.inner_text()
    assert "restart" in text and "hang" in text and "rank 1" in text
    page.click("#verdict button.culprit")
    page.wait_for_function(
        "() => [...document.querySelectorAll('#logs tbody tr')].every(r => r.dataset.rank === '1')"
    )
    shot(page, tmp_path / "verdict.png")


def test_failed_runs_stay_listed_and_learners_sit_under_their_experiment(
    folders, reader, serve, page, tmp_path
):
    base = serve(LocalSource(folders, reader=reader))
    page.goto(base)
    failed = page.locator(f'#runs tr[data-run="{postmortem.TEAM}/{postmortem.FAILED}"]')
    failed.wait_for(timeout=60_000)
    assert "failed" in failed.inner_text() and "1 bundle" in failed.inner_text()
    group = page.locator(f'#runs tr[data-experiment="{postmortem.TEAM}/{postmortem.EXPERIMENT}"]')
    assert group.count() == 1
    order = page.locator("#runs tbody tr").evaluate_all(
        "rows => rows.map(r => r.dataset.experiment || r.dataset.run)"
    )
    start = order.index(f"{postmortem.TEAM}/{postmortem.EXPERIMENT}")
    learners = [f"{postmortem.TEAM}/{postmortem.EXPERIMENT}-{x}" for x in postmortem.LEARNERS]
    assert order[start + 1 : start + 3] == learners
    assert page.locator("#runs tr.learner").count() == 2
    shot(page, tmp_path / "runs.png")
