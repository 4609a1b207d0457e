"""The render, validate, submit and catalog commands through `runner.cli.main`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from catalog import exitcodes
from runner.cli import main
from tests.runner.conftest import ROOT, write_run


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as end:
        main(argv)
    out, err = capsys.readouterr()
    return end.value.code, out, err


def test_render_writes_apps_with_a_header(repo, base, capsys):
    path = write_run(repo / "runs" / "lm", {**base, "pods": 2}, "t-run.yaml")
    code, out, _ = run_cli(["render", str(path)], capsys)
    assert code == exitcodes.OK
    assert out == (
        "wrote apps/ultra-usc1/research/t-run.yaml: "
        "2 pods × 8 H200 GPUs = 16 GPUs, 432 CPUs, 5.27 TiB\n"
    )
    text = (repo / "apps/ultra-usc1/research/t-run.yaml").read_text()
    assert text.startswith("# Rendered by runner from runs/lm/t-run.yaml; do not edit by hand.\n")
    assert [d["kind"] for d in yaml.safe_load_all(text)] == ["RayJob"]
    code, out, _ = run_cli(["render", str(path)], capsys)
    assert out.startswith("unchanged ")
    code, out, _ = run_cli(["render", "--check"], capsys)
    assert code == exitcodes.OK and "matches 1 run definitions" in out


def test_check_fails_on_a_diff_and_on_orphans(repo, base, capsys):
    path = write_run(repo / "runs" / "lm", base, "t-run.yaml")
    run_cli(["render", str(path)], capsys)
    write_run(repo / "runs" / "lm", {**base, "pods": 3}, "t-run.yaml")
    code, out, err = run_cli(["render", "--check"], capsys)
    assert code == exitcodes.DIFFERS
    assert "+      replicas: 3\n" in out and "-      replicas: 1\n" in out
    assert "1 file(s) in apps/ differ" in err
    path.unlink()
    code, out, _ = run_cli(["render", "--check"], capsys)
    assert code == exitcodes.DIFFERS and "no run definition renders this file" in out


def test_stdout_dry_run_and_bad_input_write_nothing(repo, base, capsys):
    path = write_run(repo / "runs", base, "t-run.yaml")
    code, out, err = run_cli(["render", str(path), "-o", "-", "--pods", "4"], capsys)
    assert code == 0 and "replicas: 4" in out and "4 pods × 8 H200 GPUs" in err
    assert "# Command-line overrides: --pods=4" in out
    code, out, _ = run_cli(["render", str(path), "--dry-run"], capsys)
    assert code == 0 and out.startswith("would write apps/ultra-usc1/research/t-run.yaml")
    code, _, err = run_cli(["render", str(path), "--gpus", "9"], capsys)
    assert code == exitcodes.USAGE
    assert err == "error: command line: --gpus: 9 GPUs exceed the 8 of one H200 node\n"
    assert not list((repo / "apps").rglob("*.yaml"))


def test_name_must_be_unique_in_the_namespace(repo, base, capsys):
    first = write_run(repo / "runs", base, "a.yaml")
    second = write_run(repo / "runs", base, "b.yaml")
    assert run_cli(["render", str(first)], capsys)[0] == 0
    code, _, err = run_cli(["render", str(second)], capsys)
    assert code == exitcodes.USAGE
    assert err == (
        "error: runs/b.yaml: name: run 't-run' already exists in ultra-usc1/research "
        "(apps/ultra-usc1/research/t-run.yaml, from runs/a.yaml)\n"
    )


def test_check_refuses_two_runs_with_one_name(repo, base, capsys):
    write_run(repo / "runs", base, "a.yaml")
    write_run(repo / "runs", base, "b.yaml")
    code, _, err = run_cli(["render", "--check"], capsys)
    assert (code, err) == (
        exitcodes.USAGE,
        "error: runs/b.yaml: name: run 't-run' in ultra-usc1/research is also defined by "
        "runs/a.yaml\n",
    )


def test_validate_command(capsys):
    code, out, _ = run_cli(["validate", "runs/examples/tiny-dit.yaml"], capsys)
    assert code == 0 and out.startswith("ok runs/examples/tiny-dit.yaml: RayJob;")


@pytest.mark.parametrize("fmt", ["table", "json", "yaml"])
def test_catalog_command(fmt, capsys):
    code, out, _ = run_cli(["catalog", "-o", fmt], capsys)
    assert code == 0
    if fmt == "json":
        data = json.loads(out)
        assert {c["name"] for c in data["clusters"]} == {"ultra-usc1", "mega-euw4"}
        assert {a["name"] for a in data["accelerators"]} == {"H100", "H200"}
    elif fmt == "yaml":
        assert yaml.safe_load(out)["accelerators"][0]["machine_type"] == "a3-megagpu-8g"
    else:
        assert "a3-ultragpu-8g" in out and "h200-spot:H200x8 spot[scratch]" in out


def test_help_and_render_do_not_import_heavy_packages():
    code = (
        "import sys\n"
        "from runner.cli import main\n"
        "try:\n"
        "    main(['render', 'runs/examples/tiny-lm.yaml', '-o', '-'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'ray', 'pulumi'})\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert "HEAVY []" in done.stderr, done.stderr
    helped = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys\nfrom runner.cli import main\ntry:\n main(['--help'])\n"
            "except SystemExit:\n pass\nprint(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'torch', 'ray', 'pulumi', 'jinja2', 'kubernetes_validate', 'pydantic', 'yaml'}))",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert helped.stdout.strip().endswith("[]"), helped.stdout + helped.stderr
