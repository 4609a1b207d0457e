"""Hostile arguments to the read-only day-2 commands: exit 0, 2 or 4 with at most one short
line on stderr when it fails; never a traceback (the fake cluster of tests/day2/conftest)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner.cli import MAX_LINE
from tests.preflight.conftest import invoke

OPTIONS = {
    "status": ["-n", "--cluster", "-o"],
    "describe": ["-n", "--cluster"],
    "list": ["-n", "--cluster", "-o", "--all-namespaces"],
    "logs": ["-n", "--tail", "--rank", "--pod", "--container"],
    "catalog": ["-o"],
}
VALUES = [
    "tiny-lm", "sweep", "nope", "", "-", "x" * 5000, "\udcff", "9" * 5000, "-1", "0",
    "../../etc", "tiny-lm-head", "research", "media", "$(id)", "\n", "\x1b[2J", "yaml",
]  # fmt: skip
values = st.one_of(st.sampled_from(VALUES), st.text(max_size=12))


@st.composite
def argvs(draw) -> list[str]:
    command = draw(st.sampled_from(sorted(OPTIONS)))
    argv = [command, *draw(st.lists(values, max_size=2))]
    for _ in range(draw(st.integers(0, 2))):
        argv += [draw(st.sampled_from(OPTIONS[command])), draw(values)]
    return argv


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(argv=argvs())
def test_hostile_day2_arguments_are_one_line(fake, argv):
    result = invoke(argv)
    assert result.exit_code in (0, 1, 2, 4), (argv, result.stderr[-500:])
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    if result.exit_code:
        assert result.stderr.count("\n") == 1, result.stderr[-2000:]
        assert len(result.stderr) <= MAX_LINE + 10
