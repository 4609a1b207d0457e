"""Hostile and careless inputs: each is exit 2 with one short line naming the file (and the
field), or exit 0; never a traceback, never a hang, nothing written on exit 2.

In-process cases go through `runner.cli.main`; the ones about file types and the state of
stdout run `python -m runner` in a subprocess (a timeout there only guards against a hang).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from catalog import exitcodes
from runner import boundedfile, runfile, spec_schema
from runner.cli import MAX_LINE
from tests.runner.conftest import ROOT, write_run
from tests.runner.test_cli import run_cli

HANG_GUARD_S = 60  # not a performance bound: only so a hang fails instead of blocking CI


def one_error(code: int, out: str, err: str) -> str:
    assert code == exitcodes.USAGE, err
    assert out == "" and err.startswith("error: ") and err.count("\n") == 1, err
    assert len(err) <= MAX_LINE + len("error: \n") + 10, len(err)
    assert "Traceback" not in err
    return err.strip()


def write_text(repo, text: str | bytes, name: str = "bad.yaml"):
    path = repo / "runs" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def valid_text(base: dict) -> str:
    return yaml.safe_dump(base, sort_keys=False)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (b"name: \xff\xfe\n", "runs/bad.yaml: line 1: not UTF-8 text (byte 0xff)"),
        ("a: " + "[" * 1000 + "]" * 1000, "nested deeper than 16 levels"),
        ("a: " + "{b: " * 1000 + "1" + "}" * 1000, "nested deeper than 16 levels"),
        ("ttl_seconds: " + "9" * 5000, "runs/bad.yaml: ttl_seconds: line 1: an integer of more"),
        ("pods: " + "9" * 30, "runs/bad.yaml: pods: line 1: an integer of more than 20 digits"),
        ("cmd: " + "x" * 70_000, "runs/bad.yaml: cmd: line 1: a value of 70000 characters"),
        ("a: 1\n" * 2 + "b: " + "x" * (300 * 1024), "bytes; at most 262144 are read"),
        ("env: [" + "1, " * 1500 + "1]", "runs/bad.yaml: env: line 1: more than 1000 entries"),
        ("x: &a 1\ny: *a\n", "runs/bad.yaml: x: line 1: anchors and aliases are not supported"),
        ("a: !!python/object:os.system x", "is not supported"),
        ("a: 1\n---\nb: 2\n", "runs/bad.yaml: line 2: one YAML document expected, found more"),
        ("a: \x07\n", "runs/bad.yaml: character '\\x07' at position 3 is not allowed"),
        ("{[1]: 2}", "runs/bad.yaml: line 1: a key must be a plain value"),
    ],
)
def test_malformed_files_are_one_line(repo, capsys, text, expected):
    write_text(repo, text)
    message = one_error(*run_cli(["render", "runs/bad.yaml"], capsys))
    assert expected in message
    assert not list((repo / "apps").rglob("*"))


def test_duplicate_keys_name_both_lines(repo, base, capsys):
    write_text(repo, valid_text(base) + "pods: 2\ngpus: 8\npods: 3\n")
    message = one_error(*run_cli(["render", "runs/bad.yaml"], capsys))
    lines = valid_text(base).count("\n")
    assert message == (
        f"error: runs/bad.yaml: pods: line {lines + 3}: duplicate key "
        f"(lines {lines + 1} and {lines + 3})"
    )


def test_duplicate_keys_in_a_nested_mapping_and_an_env_file(repo, base, capsys):
    write_text(repo, valid_text(base) + "env:\n  A: 1\n  A: 2\n")
    message = one_error(*run_cli(["render", "runs/bad.yaml"], capsys))
    assert message.endswith("runs/bad.yaml: env.A: line 10: duplicate key (lines 9 and 10)")
    (repo / "runs" / "env" / "dup.yaml").write_text("X: 1\nY: 2\nX: 3\n")
    write_run(repo / "runs", {**base, "env_file": "runs/env/dup.yaml"}, "bad.yaml")
    message = one_error(*run_cli(["render", "runs/bad.yaml"], capsys))
    assert message == "error: runs/env/dup.yaml: X: line 3: duplicate key (lines 1 and 3)"


def test_a_file_name_too_long_for_the_os(repo, capsys):
    message = one_error(*run_cli(["render", "x" * 300 + ".yaml"], capsys))
    assert message.endswith(": cannot read: File name too long")


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--pods", "9" * 40], "command line: --pods: Input should be less than or equal to"),
        (["--pods", "9" * 5000], "command line: --pods: 5000 characters; at most 4096"),
        (["--gpus", "99999999999"], "command line: --gpus: Input should be less than or equal"),
        (["--ttl-seconds", "9" * 19], "command line: --ttl-seconds: Input should be less than"),
        (["--cmd", "x " * 40_000], "command line: --cmd: 80000 characters; at most 32768"),
        (["--set", "a=\udcff"], "command line: --set: is not valid UTF-8 text"),
        (["--set", "a=" + "b" * 5000], "command line: --set: 5002 characters; at most 4096"),
        (["--set", "a=b"] * 300, "command line: --set: 300 entries; at most 256"),
        (["--image", "x" * 100_000], "command line: --image: 100000 characters; at most 4096"),
        (["--namespace", "n" * 4000], "command line: --namespace: 'nnnnnnnn"),
        (["--env", "\udcff.yaml"], "command line: --env: is not valid UTF-8 text"),
        (["--env", "/dev/zero"], "/dev/zero: not a regular file (a character device)"),
        (["--env", "e" * 300], ": cannot read: File name too long"),
        (["--working-dir", "w" * 300], "command line: --working-dir: 'wwwwwwwwwwwwwwwwwwwwwww"),
    ],
)
def test_hostile_flags_are_one_line(repo, base, capsys, flags, expected):
    write_run(repo / "runs", base, "ok.yaml")
    message = one_error(*run_cli(["render", "runs/ok.yaml", *flags], capsys))
    assert expected in message
    assert not list((repo / "apps").rglob("*"))


def test_a_file_name_that_is_not_utf8(repo, capsys):
    message = one_error(*run_cli(["validate", "\udcff.yaml"], capsys))
    assert message == "error: command line: RUN: '\\udcff.yaml': the name is not UTF-8"


def test_limits_are_the_documented_ones():
    text = (ROOT / "docs" / "runner.md").read_text()
    for figure in (
        f"{boundedfile.MAX_FILE_BYTES // 1024} KiB",
        f"{runfile.MAX_DEPTH} levels",
        f"{runfile.MAX_ITEMS} entries",
        f"{runfile.MAX_SCALAR // 1024} KiB",
        f"{runfile.MAX_INT_DIGITS} digits",
        f"{spec_schema.MAX_TEXT} characters",
        f"{spec_schema.MAX_CMD // 1024} KiB",
        f"{spec_schema.MAX_ENTRIES} entries",
        f"{spec_schema.MAX_PODS:,}",
        f"at most {spec_schema.MAX_GPUS}",
    ):
        assert figure in text, figure


def test_render_of_several_files_is_all_or_nothing(repo, base, capsys):
    good = write_run(repo / "runs", base, "a.yaml")
    bad = write_run(repo / "runs", {**base, "name": "b-run", "gpus": 99}, "b.yaml")
    code, out, err = run_cli(["render", str(good), str(bad)], capsys)
    one_error(code, out, err)
    assert not list((repo / "apps").rglob("*"))
    code, out, _ = run_cli(["render", str(good), str(bad), "-o", "-"], capsys)
    assert code == exitcodes.USAGE and out == ""


def test_two_files_of_one_run_in_one_render_are_refused(repo, base, capsys):
    first = write_run(repo / "runs", base, "a.yaml")
    second = write_run(repo / "runs", base, "b.yaml")
    message = one_error(*run_cli(["render", str(first), str(second)], capsys))
    assert message == (
        "error: runs/b.yaml: name: run 't-run' in ultra-usc1/research is also defined by "
        "runs/a.yaml"
    )
    assert not list((repo / "apps").rglob("*"))


# --- subprocess cases: file types and the state of stdout ---------------------------


def runner(args: list[str], cwd, **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, "PLATFORM_ROOT": str(cwd)}
    return subprocess.run(
        [sys.executable, "-m", "runner", *args],
        cwd=cwd,
        env=env,
        capture_output=kwargs.pop("capture_output", True),
        timeout=HANG_GUARD_S,
        **kwargs,
    )


def test_a_fifo_is_refused_without_reading(repo, base):
    fifo = repo / "runs" / "fifo.yaml"
    fifo.parent.mkdir(exist_ok=True)
    os.mkfifo(fifo)
    result = runner(["validate", "runs/fifo.yaml"], repo, text=True)
    assert (result.returncode, result.stderr) == (
        exitcodes.USAGE,
        "error: runs/fifo.yaml: not a regular file (a FIFO)\n",
    )


def test_dev_zero_is_refused(repo):
    result = runner(["render", "/dev/zero"], repo, text=True)
    assert (result.returncode, result.stderr) == (
        exitcodes.USAGE,
        "error: /dev/zero: not a regular file (a character device)\n",
    )


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
def test_stdout_full_is_one_line_exit_1(repo, base):
    write_run(repo / "runs", base, "ok.yaml")
    with open("/dev/full", "w") as full:
        result = runner(
            ["render", "runs/ok.yaml", "-o", "-"], repo, stdout=full, stderr=subprocess.PIPE,
            capture_output=False, text=True,
        )  # fmt: skip
    assert (result.returncode, result.stderr) == (
        exitcodes.FAILURE,
        "error: writing output: No space left on device\n",
    )


def test_stdout_closed_pipe_and_closed_descriptor(repo, base):
    write_run(repo / "runs", base, "ok.yaml")
    args = [sys.executable, "-m", "runner", "render", "runs/ok.yaml", "-o", "-", "--pods", "2"]
    env = {**os.environ, "PLATFORM_ROOT": str(repo)}
    reader, writer = os.pipe()
    os.close(reader)  # nobody reads: the first write fails with EPIPE
    try:
        result = subprocess.run(
            args, cwd=repo, env=env, stdout=writer, stderr=subprocess.PIPE, timeout=HANG_GUARD_S
        )
    finally:
        os.close(writer)
    assert result.returncode == exitcodes.FAILURE and b"Traceback" not in result.stderr
    closed = subprocess.run(
        args, cwd=repo, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        timeout=HANG_GUARD_S, preexec_fn=lambda: os.close(1),
    )  # fmt: skip
    assert closed.returncode == exitcodes.OK and closed.stderr.count(b"\n") == 1
    assert b"Traceback" not in closed.stderr


@pytest.mark.parametrize(
    "command",
    [["validate"], ["render", "--dry-run"], ["run", "--local", "--dry-run"],
     ["submit", "--dry-run", "-f"]],
    ids=["validate", "render", "run", "submit"],
)  # fmt: skip
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, "/dev/zero: not a regular file (a character device)"),
        (b"name: x\n\xc3\x28\n", "runs/bad.yaml: line 2: not UTF-8 text (byte 0xc3)"),
        ("a: " + "[" * 500 + "]" * 500, "nested deeper than 16 levels"),
        ("name: a\nname: b\n", "runs/bad.yaml: name: line 2: duplicate key (lines 1 and 2)"),
    ],
    ids=["dev-zero", "not-utf8", "deep", "duplicate"],
)
def test_every_command_that_reads_a_run_file_reads_it_safely(repo, capsys, command, text, expected):
    path = "/dev/zero" if text is None else str(write_text(repo, text).relative_to(repo))
    message = one_error(*run_cli([*command, path], capsys))
    assert expected in message
    assert not list((repo / "apps").rglob("*"))


def test_names_and_values_cannot_add_lines_to_an_apps_file(repo, base, capsys):
    """A file name or a flag value with a line break stays inside the header's comments."""
    path = write_run(repo / "runs", base, "x\nkind: ClusterRoleBinding\n.yaml")
    argv = ["render", str(path), "--cmd", "python t.py\napiVersion: v1"]
    code, out, _ = run_cli(argv, capsys)
    assert code == exitcodes.OK, out
    text = (repo / "apps/ultra-usc1/research/t-run.yaml").read_text()
    header = text.split("---\n", 1)[0]
    assert all(line.startswith("# ") for line in header.splitlines()), header
    assert [d["kind"] for d in yaml.safe_load_all(text)] == ["RayJob"]
    assert run_cli(argv, capsys)[0] == exitcodes.OK  # the header names the file: unchanged


def test_a_run_file_name_with_spaces_renders_again(repo, base, capsys):
    path = write_run(repo / "runs", base, "my run.yaml")
    assert run_cli(["render", str(path)], capsys)[0] == exitcodes.OK
    code, out, err = run_cli(["render", str(path)], capsys)
    assert (code, err) == (exitcodes.OK, "") and out.startswith("unchanged "), err
