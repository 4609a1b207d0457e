"""The manifest YAML writer and the template parser agree with PyYAML on every value."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.templating import parse_documents
from runner.yamltext import dump_documents, scalar

leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.sampled_from(
        [
            "yes",
            "No",
            "on",
            "~",
            "null",
            "1e3",
            "0o7",
            "a: b",
            "x #y",
            "- z",
            "=",
            "<<",
            "'q'",
            '"q"',
            "line\n",
            "a\nb\n",
            " lead\n",
            "t\tab",
            "2001-01-01",
        ]
    ),
)
trees = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=25,
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.dictionaries(st.text(max_size=8), trees, max_size=5), max_size=3))
def test_dump_round_trips_through_pyyaml(documents):
    text = dump_documents(documents)
    assert list(yaml.safe_load_all(text)) == documents
    assert parse_documents(text) == [d for d in documents if d is not None]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.dictionaries(st.text(max_size=8), trees, max_size=5), min_size=1, max_size=3))
def test_parser_equals_safe_load_on_pyyaml_text(documents):
    text = yaml.safe_dump_all(documents, default_flow_style=False)
    assert parse_documents(text) == [d for d in yaml.safe_load_all(text) if d is not None]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("K8sJobMode", "K8sJobMode"),
        ("yes", '"yes"'),
        ("2.60.0", '"2.60.0"'),
        ('[{"a":1}]', "'[{\"a\":1}]'"),
        (True, "true"),
        (None, "null"),
        (3, "3"),
    ],
)
def test_scalar(value, text):
    assert scalar(value) == text
