"""Driver-side progress without Ray: a progress bar locally, JSON lines in a cluster, and
every row in the metrics file either way."""

from __future__ import annotations

import json

import pytest

from driver.config.compose import compose
from driver.output.progress import Progress
from tests.driver.conftest import TINY_LM


def rows(count: int) -> list[dict]:
    return [
        {"step": i + 1, "loss": 4.0 - i / 10, "lr": 1e-3, "step_time": 0.1,
         "tokens_per_s": 2048.0, "time": 100.0 + i / 10}
        for i in range(count)
    ]  # fmt: skip


@pytest.mark.parametrize("fmt", ["progress", "json"])
def test_rows_reach_the_metrics_file_and_the_terminal(tmp_path, capsys, fmt):
    cfg, _ = compose(TINY_LM, ["run.name=p", "run.team=t", "run.cluster=c", "train.steps=6"])
    progress = Progress(cfg, sink=None, output_dir=tmp_path, fmt=fmt)
    progress.log("starting")
    progress.take(rows(2))
    progress.take(rows(6)[2:])
    progress.close()  # the writers too: a store left open takes every later run's
    written = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in written] == [1, 2, 3, 4, 5, 6]
    out, err = capsys.readouterr()
    if fmt == "json":  # one line per message and per step, with the run's identity
        lines = [json.loads(line) for line in out.splitlines()]
        assert lines[0]["message"] == "starting"  # with the label set (catalog.labels)
        assert {k: lines[0][k] for k in ("run", "team", "cluster", "service")} == {
            "run": "p",
            "team": "t",
            "cluster": "c",
            "service": "train",
        }
        assert [line["step"] for line in lines[1:]] == [1, 2, 3, 4, 5, 6]
        assert all(line["run"] == "p" and "lr" in line for line in lines[1:])
        assert err == ""
    else:  # a bar on stderr with loss, lr and throughput; nothing on stdout
        assert out == ""
        assert "starting" in err and "6/6" in err
        assert "loss=3.500" in err and "tokens/s=2048" in err and "lr=1.0e-03" in err
    assert list(progress.lines)[-1] == "step 6 loss 3.5000 lr 1.00e-03"


def test_a_drained_batch_is_written_in_the_order_its_steps_were_trained(tmp_path):
    """Under torchft an old writer's last rows and a new writer's first come on two
    connections and may be handled out of order: metrics.jsonl and the summary go by time."""
    cfg, _ = compose(TINY_LM, ["run.name=p", "train.steps=6"])
    progress = Progress(cfg, sink=None, output_dir=tmp_path, fmt="json")
    batch = rows(6)
    progress.take([*batch[:3], batch[5], *batch[3:5]])  # the new writer's row 6 came first
    progress.close()
    written = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in written] == [1, 2, 3, 4, 5, 6]
    assert [row["step"] for row in progress.rows] == [1, 2, 3, 4, 5, 6]


def test_sink_keeps_rows_until_drained_and_failures_by_rank():
    from driver.channel.state import Sink

    sink = Sink()
    sink.push({"step": 1})
    sink.push_many([{"step": 2}, {"step": 3}])
    assert [row["step"] for row in sink.drain()] == [1, 2, 3]
    assert sink.drain() == []
    sink.fail(1, {"error": "RuntimeError: x"})
    assert sink.get_failures() == {1: {"error": "RuntimeError: x"}}


def test_a_failed_save_shows_in_the_bar_and_the_log(tmp_path, capsys):
    cfg, _ = compose(TINY_LM, ["run.name=p", "run.team=t", "run.cluster=c", "train.steps=6"])
    progress = Progress(cfg, sink=None, output_dir=tmp_path, fmt="progress")
    failed = [{**row, "ckpt_failures": 1, "ckpt_error": "step-2: write failed: ENOSPC"}
              for row in rows(2)[1:]]  # fmt: skip
    progress.take(rows(1) + failed)
    assert progress.bar.postfix and "ckpt_fail=1" in progress.bar.postfix
    progress.bar.close()
    progress.metrics.close()
    assert "checkpoint save failed: step-2: write failed: ENOSPC" in capsys.readouterr().err


def test_the_progress_thread_outlives_a_failing_drain(tmp_path, capsys):
    import time

    cfg, _ = compose(TINY_LM, ["run.name=p", "run.team=t", "run.cluster=c"])
    progress = Progress(cfg, sink=None, output_dir=tmp_path, fmt="json", interval_s=0.01)
    calls = []

    def drain():
        calls.append(1)
        raise OSError(28, "No space left on device")

    progress.drain = drain
    progress.start()
    deadline = time.monotonic() + 30
    while len(calls) < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(calls) >= 5 and progress._thread.is_alive()
    progress._stop.set()
    progress._thread.join()
    progress.metrics.close()
    err = capsys.readouterr().err
    assert err.count("progress: OSError") == 1  # reported once, polling went on
