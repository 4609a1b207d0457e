"""Property tests: no generated run definition or flag ends in a traceback or a hang.

Only success or an InputError (exit 2, one line). The hostile generators live in
tests/runner/hostile.py (whole cases: hostile_cases.py); `scripts/fuzz-runs` runs 10,000.
"""

from __future__ import annotations

import contextlib
import io

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from catalog import exitcodes
from catalog.errors import InputError
from runner.cli import main
from runner.render import render
from runner.spec import build_spec
from runner.spec_schema import RunSpec
from tests.runner import hostile
from tests.runner.conftest import IMAGE

COMMANDS = ["render", "validate"]

FIELDS = sorted(RunSpec.model_fields)
quantities = st.one_of(
    st.integers(-5, 10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["8", "500m", "512Gi", "1Ti", "0", "-1", "1e3", "Gi", "0.5", "10x", ""]),
)
anything = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 300),
    quantities,
    st.text(max_size=30),
    st.lists(st.text(max_size=10), max_size=3),
    st.dictionaries(st.text(max_size=8), st.one_of(st.text(max_size=8), st.integers()), max_size=3),
)
VALUES = {
    "name": st.one_of(st.sampled_from(["ok", "a" * 60, "Bad", "x-"]), st.text(max_size=70)),
    "type": st.sampled_from(["rayjob", "raycluster", "job", "pod"]),
    "cluster": st.sampled_from(["ultra-usc1", "mega-euw4", "nope"]),
    "namespace": st.sampled_from(["research", "media", "ops", "Bad"]),
    "accelerator": st.sampled_from([None, "H100", "H200", "B200"]),
    "gpus": st.one_of(st.none(), st.integers(-1, 17)),
    "pods": st.one_of(st.integers(-1, 300), st.text(max_size=3)),
    "cpus": st.one_of(st.none(), quantities),
    "memory": st.one_of(st.none(), quantities),
    "shm": st.one_of(st.none(), quantities),
    "image": st.one_of(st.just(IMAGE), st.text(max_size=40)),
    "train_config": st.one_of(st.none(), st.just("runs/train/tiny-lm.yaml"), st.text(max_size=20)),
    "env_file": st.one_of(st.none(), st.just("runs/env/research.yaml"), st.text(max_size=20)),
    "env": st.one_of(
        anything,
        st.dictionaries(
            st.text(max_size=12),
            st.one_of(
                st.text(max_size=8),
                st.integers(),
                st.none(),
                st.just({"secretKeyRef": {"name": "s", "key": "k"}}),
            ),
            max_size=4,
        ),
    ),
    "cmd": st.one_of(st.none(), st.text(max_size=40)),
}
run_definitions = st.fixed_dictionaries(
    {
        "name": VALUES["name"],
        "type": VALUES["type"],
        "cluster": VALUES["cluster"],
        "namespace": VALUES["namespace"],
        "image": VALUES["image"],
    },
    optional={
        field: VALUES.get(field, anything)
        for field in FIELDS
        if field not in ("name", "type", "cluster", "namespace", "image")
    },
)


VALID = {
    "name": "ok",
    "type": "rayjob",
    "cluster": "ultra-usc1",
    "namespace": "research",
    "accelerator": "H200",
    "image": IMAGE,
    "train_config": "runs/train/tiny-lm.yaml",
}
near_valid = st.dictionaries(
    st.sampled_from(FIELDS),
    st.one_of(*(VALUES.get(f, anything) for f in FIELDS), anything),
    max_size=3,
).map(lambda changes: {**VALID, **changes})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=near_valid,
    flags=st.dictionaries(
        st.sampled_from(FIELDS), st.one_of(quantities, st.integers(-2, 20), st.none()), max_size=2
    ),
)
def test_no_traceback_for_near_valid_definitions(data, flags):
    try:
        render(build_spec(data, "runs/generated.yaml", flags))
    except InputError as err:
        assert "\n" not in err.line().strip()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=run_definitions, flags=st.dictionaries(st.sampled_from(FIELDS), anything, max_size=2))
def test_no_traceback_for_any_run_definition(data, flags):
    try:
        spec = build_spec(data, "runs/generated.yaml", flags)
        render(spec)
    except InputError as err:
        line = err.line()
        assert line and "\n" not in line.strip()


FLAG_NAMES = [
    "--type", "--cluster", "--namespace", "--team", "--pods", "--gpus", "--cpus", "--memory",
    "--accelerator", "--accelerators", "--image", "--docker-image", "--working-dir", "--env",
    "--priority", "--cmd", "--train-config", "--ttl-seconds", "--head-cpus", "--head-memory",
    "--rack-affinity", "--shm", "--resource-group", "--resume", "--set",
]  # fmt: skip
flag_text = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=["Cs"]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.sampled_from(FLAG_NAMES), flag_text.map(lambda t: t[:24])), max_size=4)
)
def test_no_traceback_for_any_flags(pairs):
    """`runner render RUN --dry-run --FLAG=VALUE...` ends 0, or 2 with one line."""
    argv = ["render", "runs/examples/tiny-lm.yaml", "--dry-run", *(f"{f}={v}" for f, v in pairs)]
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            main(argv)
        except SystemExit as end:
            code = end.code
    assert code in (exitcodes.OK, exitcodes.USAGE), err.getvalue()
    if code == exitcodes.USAGE:
        assert err.getvalue().startswith("error: ") and err.getvalue().count("\n") == 1


# --- hostile files and flags through the CLI (tests/runner/hostile.py) ------------------
@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("hostile")


@settings(max_examples=1200, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=hostile.run_files(), pairs=hostile.flag_lists, command=st.sampled_from(COMMANDS))
def test_hostile_run_files_and_flags(folder, data, pairs, command):
    """Mutated run definitions (bad bytes, duplicate keys, deep nesting, huge values) with
    hostile flags: exit 0, or exit 2 with one short line; no traceback, no hang."""
    hostile.check_file(folder, data, pairs, command)


@settings(max_examples=800, deadline=None, suppress_health_check=list(HealthCheck))
@given(pairs=hostile.flag_lists)
def test_hostile_flags_on_a_valid_run(pairs):
    hostile.check_cli(["validate", "runs/examples/tiny-lm-spot.yaml", *hostile._argv(pairs)])
