"""A committed step deleted by another rank's retention while this rank lists the run (rank 0
keeps `keep_last`; rank 1 asks for the newest checkpoint as the run ends): the step is gone,
not an error. Seen in CI as `AttributeError: 'NoneType' object has no attribute 'team'` from
the marker check, which failed rank 1 after the last step and made Ray Train restart a
finished run."""

from __future__ import annotations

import logging
import shutil

import pytest

from driver.checkpoint.storage import Storage


def committed_steps(root, *steps: int) -> None:
    for step in steps:
        folder = root / f"step-{step}"
        folder.mkdir(parents=True)
        (folder / ".metadata").write_text("m")
        (folder / "COMMITTED").write_text("{}")


@pytest.mark.parametrize("gone", ["before the read", "inside the read"])
def test_a_step_deleted_while_listed_is_left_out_without_a_warning(tmp_path, caplog, gone):
    run = tmp_path / "run"
    committed_steps(run, 3, 6)
    storage = Storage(str(run), check=lambda marker, uri: None if marker else "no marker")
    read = storage.read_marker

    def racing_read(uri: str):
        if uri.endswith("step-3"):  # retention deletes it between the listing and the read
            shutil.rmtree(run / "step-3")
            if gone == "inside the read":
                raise FileNotFoundError(uri)
            return read(uri)
        return object()  # step-6: a marker the check accepts

    storage.read_marker = racing_read
    with caplog.at_level(logging.WARNING):
        assert storage.step_dirs() == {6: True}
    assert "ignoring checkpoint" not in caplog.text
