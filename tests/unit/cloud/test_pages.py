"""A list page read a runner at a time reads what `json.loads` of the whole page reads, or refuses it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner_operator.cloud import errors
from runner_operator.cloud.pages import Page

leaves = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
values = st.recursive(
    leaves,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=12,
)
entries = st.dictionaries(st.sampled_from(["identity", "spec", "x", "é\u2028", '"q']), values, max_size=4)
others = st.dictionaries(
    st.text(max_size=6).filter(lambda key: key not in ("managedRunners", "runners")), values, max_size=3
)


def _read(text: str) -> tuple[list[Any], dict[str, Any], str | None]:
    page = Page(text)
    return list(page.runners()), page.fields, page.array


@given(
    array=st.sampled_from(["managedRunners", "runners"]),
    runners=st.lists(entries, max_size=5),
    fields=others,
    where=st.integers(0, 3),
    indent=st.sampled_from([None, 0, 2, "\t"]),
    separators=st.sampled_from([None, (",", ":"), (" , ", " : ")]),
)
def test_a_page_reads_as_json_loads_reads_it(
    array: str,
    runners: list[dict[str, Any]],
    fields: dict[str, Any],
    where: int,
    indent: int | str | None,
    separators: tuple[str, str] | None,
) -> None:
    members = list(fields.items())
    members.insert(min(where, len(members)), (array, runners))
    text = json.dumps(dict(members), indent=indent, separators=separators, ensure_ascii=False)
    assert _read(text) == (runners, fields, array)
    assert _read(f" \n{text}\r\n") == (runners, fields, array)


def test_the_token_is_read_wherever_it_stands() -> None:
    before = Page('{"nextPageToken": "2", "managedRunners": [{"a": 1}]}')
    after = Page('{"managedRunners": [{"a": 1}], "nextPageToken": "2"}')
    for page in (before, after):
        assert list(page.runners()) == [{"a": 1}]
        assert page.next_page_token == "2"


@pytest.mark.parametrize(
    "text", ["", "{}", '{"managedRunners": null}', '{"managedRunners": []}', '{"nextPageToken": ""}']
)
def test_pages_without_runners(text: str) -> None:
    page = Page(text)
    assert list(page.runners()) == []
    assert not page.next_page_token


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "not JSON"),
        (" ", "not JSON"),
        ("[]", "not a JSON object"),
        ('"runners"', "not a JSON object"),
        ('{"managedRunners": [{"a": 1}, {"b": 2}', "not JSON"),
        ('{"managedRunners": [{"a": 1} {"b": 2}]}', "not JSON"),
        ('{"managedRunners": [{"a": 1},]}', "not JSON"),
        ('{"managedRunners": [], }', "not JSON"),
        ('{"managedRunners" [] }', "not JSON"),
        ("{1: []}", "not JSON"),
        ('{"managedRunners": []} trailing', "not JSON"),
        ('{"managedRunners": []}{}', "not JSON"),
        ('{"managedRunners": {"a": 1}}', "no array of runners"),
        ('{"runners": "a"}', "no array of runners"),
        ('{"runners": [], "managedRunners": []}', "both runners and managedRunners"),
    ],
)
def test_a_malformed_page_is_refused(text: str, message: str) -> None:
    with pytest.raises(errors.IncompatibleServer, match=message):
        list(Page(text).runners())


def test_runners_before_a_fault_are_yielded_then_the_page_is_refused() -> None:
    """A list that breaks half-way is an incomplete list: its caller drops nothing (cache.py)."""
    runners = Page('{"managedRunners": [{"a": 1}, {"b": 2}, {"c": ]}').runners()
    assert next(runners) == {"a": 1}
    assert next(runners) == {"b": 2}
    with pytest.raises(errors.IncompatibleServer):
        next(runners)
