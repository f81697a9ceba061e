"""safejson's nesting limit: exactly `max_depth` levels pass, one more is refused, whatever
the text around the brackets (brackets inside strings, whitespace, a value in a longer text)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors import safejson


def nested(levels: int, *, opener: str = "[", leaf: str = "1") -> str:
    closer = "]" if opener == "[" else "}"
    return opener * levels + leaf + closer * levels


def depth(value: Any) -> int:
    children = value.values() if isinstance(value, dict) else value
    if not isinstance(value, dict | list):
        return 0
    return 1 + max((depth(child) for child in children), default=0)


@pytest.mark.parametrize("opener", ["[", '{"k":'])
@pytest.mark.parametrize("max_depth", [1, 2, 5, safejson.MAX_DEPTH])
def test_exactly_max_depth_passes_and_one_more_is_refused(opener: str, max_depth: int) -> None:
    assert safejson.loads(nested(max_depth, opener=opener), max_depth=max_depth)
    with pytest.raises(safejson.JsonTooDeep):
        safejson.loads(nested(max_depth + 1, opener=opener), max_depth=max_depth)
    with pytest.raises(safejson.JsonTooDeep):
        safejson.raw_decode("x " + nested(max_depth + 1, opener=opener), 2, max_depth=max_depth)


def test_empty_containers_count_as_a_level() -> None:
    assert safejson.loads("[[[]]]", max_depth=3) == [[[]]]
    with pytest.raises(safejson.JsonTooDeep):
        safejson.loads("[[[{}]]]", max_depth=3)


def test_brackets_inside_strings_neither_refuse_nor_hide_depth() -> None:
    # Many brackets in a string: shallow data is accepted...
    shallow = json.dumps({"text": "[1] [2] {x} " * 100})
    assert safejson.loads(shallow, max_depth=1)["text"].startswith("[1]")
    # ...and deep data is refused however many of its brackets sit in strings.
    deep = json.dumps({"a": [[{"b": "[[[[" * 50}]]})
    assert safejson.loads(deep, max_depth=4)
    with pytest.raises(safejson.JsonTooDeep):
        safejson.loads(deep, max_depth=3)


def test_raw_decode_judges_only_the_value_it_read() -> None:
    text = nested(3) + " " + nested(10)
    value, end = safejson.raw_decode(text, 0, max_depth=3)
    assert value == [[[1]]] and text[end:].startswith(" [")
    with pytest.raises(safejson.JsonTooDeep):
        safejson.raw_decode(text, end + 1, max_depth=3)


@settings(deadline=None, max_examples=300)
@given(
    st.recursive(
        st.none() | st.integers() | st.text(alphabet='[]{}"\\ a'),
        lambda children: st.lists(children) | st.dictionaries(st.text("[]{}a"), children),
    ),
    st.integers(min_value=1, max_value=6),
)
def test_loads_refuses_exactly_what_nests_too_deep(value: Any, max_depth: int) -> None:
    text = json.dumps(value, indent=1)
    if depth(value) > max_depth:
        with pytest.raises(safejson.JsonTooDeep):
            safejson.loads(text, max_depth=max_depth)
    else:
        assert safejson.loads(text, max_depth=max_depth) == value
