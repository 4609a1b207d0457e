"""Flight recorder settings, dumps read without trusting pickles, and their analysis, on dumps
recorded with torch's own recorder (tests/fixtures/flight-recorder/record.py)."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from observability import flight_recorder as fr
from observability import fr_analysis

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "flight-recorder"


def test_env_for_a_training_rank(tmp_path):
    env = fr.env(tmp_path / "out", buffer_size=4000)
    prefix = str(tmp_path / "out" / "flight-recorder" / "rank_")
    assert env == {
        "TORCH_FR_BUFFER_SIZE": "4000",
        "TORCH_NCCL_TRACE_BUFFER_SIZE": "4000",
        "TORCH_FR_DUMP_TEMP_FILE": prefix,
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": prefix,
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
    }
    assert fr.env(tmp_path, 0) == {}
    quiet = fr.env(tmp_path, 10, dump_on_timeout=False, timing=True)
    assert quiet["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "0" and quiet["TORCH_NCCL_ENABLE_TIMING"] == "1"
    assert fr.prepare(tmp_path / "out").is_dir()


def test_pickle_and_json_dumps_read_alike():
    pickles, errors = fr.load_dir(FIXTURES / "pickle")
    jsons, more = fr.load_dir(FIXTURES / "json")
    assert sorted(pickles) == sorted(jsons) == [0, 1, 2] and errors == more == []
    keys = ("collective_seq_id", "profiling_name", "input_sizes", "state", "process_group")
    for rank in pickles:
        assert [[e[k] for k in keys] for e in pickles[rank]["entries"]] == [
            [e[k] for k in keys] for e in jsons[rank]["entries"]
        ]
        assert pickles[rank]["pg_status"] == jsons[rank]["pg_status"]


def test_analysis_of_a_desynchronized_job():
    dumps, _ = fr.load_dir(FIXTURES / "pickle")
    (group,) = fr_analysis.analyse(dumps)["groups"]
    assert (group["group"], group["desc"], group["ranks"]) == ("0", "default_pg", [0, 1, 2])
    assert group["latest"] == {"seq": 4, "op": "gloo:all_reduce [[3, 4]]"}
    assert group["entered_latest"] == [0] and group["never_entered"] == [1, 2]
    assert {r: last["seq"] for r, last in group["last_per_rank"].items()} == {
        "0": 4, "1": 3, "2": 2}  # fmt: skip
    assert group["mismatches"] == [{"seq": 3, "by_rank": {
        "0": "gloo:all_reduce [[4, 5]]", "1": "gloo:all_reduce [[3, 4]]"}}]  # fmt: skip


def test_a_missing_rank_never_entered():
    dumps, _ = fr.load_dir(FIXTURES / "json")
    del dumps[2]
    (group,) = fr_analysis.analyse(dumps)["groups"]
    assert group["no_dump"] == [2] and group["never_entered"] == [1, 2]
    text = "\n".join(fr_analysis.lines(fr_analysis.analyse(dumps)))
    assert "no dump from ranks [2]" in text and "mismatch at #3" in text


class Boom:
    def __reduce__(self):
        return (print, ("pwned",))


@pytest.mark.parametrize(
    "data, message",
    [
        (pickle.dumps({"version": "2.10", "x": Boom()}), "refused builtins.print"),
        (b"\x80\x04junk", "not a flight recorder dump"),
        (b'{"entries": []}', "no version"),
    ],
)
def test_untrusted_dumps_are_refused(tmp_path, data, message, capsys):
    path = tmp_path / "rank_0"
    path.write_bytes(data)
    with pytest.raises(fr.DumpError, match=message):
        fr.load(path)
    assert "pwned" not in capsys.readouterr().out
    dumps, errors = fr.load_dir(tmp_path)
    assert dumps == {} and errors[0].startswith(str(path))


SNAPSHOT = """
import json, os, sys, datetime
os.environ.update(json.loads(sys.argv[1]))
import torch, torch.distributed as dist
from observability import flight_recorder as fr
dist.init_process_group("gloo", init_method=sys.argv[2], rank=0, world_size=1)
t = torch.ones(2, 3)
for _ in range(3):
    dist.all_reduce(t)
print(json.dumps(fr.snapshot()))
"""


def test_snapshot_of_a_live_process_group(tmp_path):
    env = fr.env(tmp_path, buffer_size=50)
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", SNAPSHOT, json.dumps(env), f"file://{tmp_path}/store"],
        capture_output=True, text=True, timeout=120, cwd=root,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    dump = json.loads(done.stdout.splitlines()[-1])
    assert [e["collective_seq_id"] for e in dump["entries"]] == [1, 2, 3]
    assert dump["entries"][0]["input_sizes"] == [[2, 3]]
    (group,) = fr_analysis.analyse({0: dump})["groups"]
    assert group["never_entered"] == [] and group["latest"]["seq"] == 3
