"""A list page read a runner at a time, whole or as it arrives, reads what `json.loads` of the whole
page reads, or refuses it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner_operator.cloud import errors, pages
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


# --- read as the text arrives -----------------------------------------------------------------------


async def _chunks(parts: list[str]) -> AsyncIterator[str]:
    for part in parts:
        yield part


def _split(text: str, cuts: list[int]) -> list[str]:
    points = sorted({min(cut, len(text)) for cut in cuts})
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]


async def _read_chunked(parts: list[str]) -> tuple[list[Any], dict[str, Any], str | None]:
    page = Page()
    runners = [item async for item in page.read(_chunks(parts))]
    return runners, page.fields, page.array


@given(
    array=st.sampled_from(["managedRunners", "runners"]),
    runners=st.lists(entries, max_size=5),
    fields=others,
    where=st.integers(0, 3),
    indent=st.sampled_from([None, 2]),
    cuts=st.lists(st.integers(0, 400), max_size=12),
)
def test_a_page_in_chunks_reads_as_json_loads_reads_it(
    array: str,
    runners: list[dict[str, Any]],
    fields: dict[str, Any],
    where: int,
    indent: int | None,
    cuts: list[int],
) -> None:
    """Wherever the chunks are cut (inside a number, a string, an escape, between a key and its colon)."""
    members = list(fields.items())
    members.insert(min(where, len(members)), (array, runners))
    text = json.dumps(dict(members), indent=indent, ensure_ascii=False)
    assert asyncio.run(_read_chunked(_split(text, cuts))) == (runners, fields, array)


@pytest.mark.parametrize(
    "parts",
    [
        ['{"total": 12', '34, "runners": [1', "0]}"],
        ['{"total": 1234.', '5, "runners": [1', "0]}"],
        ['{"total": 1234.5e', '0, "runners": [10.', "0]}"],
        ['{"total": 1234.5E+', '0, "runners": [1e', "1]}"],
        ['{"total": -', '1234.5, "runners": [-', "10]}"],
        ['{"total": 1234.5', "", ' , "runners": [10', "]", "}"],
        ['{"ok": tr', 'ue, "runners": [nu', "ll, fals", "e]}"],
    ],
)
def test_a_value_cut_by_a_chunk_is_read_whole(parts: list[str]) -> None:
    """`1.` of `1.5` parses as the number 1 on its own: a value is taken only once what follows it
    shows that it has ended."""
    whole = json.loads("".join(parts))
    fields = {key: value for key, value in whole.items() if key != "runners"}
    assert asyncio.run(_read_chunked(parts)) == (whole["runners"], fields, "runners")


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "not json",
        '{"managedRunners": [{"a": 1}, {"b": 2}',
        '{"managedRunners": [{"a": 1},]}',
        '{"managedRunners": []} trailing',
        '{"runners": [], "managedRunners": []}',
        '{"nextPageToken": "2", "managedRunners": [{"a": 1}]}',
    ],
)
async def test_a_page_one_character_at_a_time_reads_or_fails_as_a_whole_one(text: str) -> None:
    def whole() -> object:
        try:
            return _read(text)
        except errors.IncompatibleServer as exc:
            return str(exc)

    try:
        chunked: object = await _read_chunked(list(text))
    except errors.IncompatibleServer as exc:
        chunked = str(exc)
    assert chunked == whole()


async def test_only_about_one_runner_and_one_chunk_are_held_at_a_time() -> None:
    """The memory claim of the module: a 1 MB page read in 4 KB chunks never holds much more than
    the text already read but not yet dropped (KEEP_READ), one runner and one chunk."""
    runner = {"identity": {"runnerId": "r"}, "spec": {"blob": "x" * 2000}}
    text = json.dumps({"managedRunners": [runner] * 500, "nextPageToken": "t"})
    parts = [text[i : i + 4096] for i in range(0, len(text), 4096)]
    page, held, count = Page(), 0, 0
    async for _ in page.read(_chunks(parts)):
        count += 1
        held = max(held, page.held)
    assert count == 500
    assert page.next_page_token == "t"
    assert len(text) > 1_000_000
    assert held <= pages.KEEP_READ + 2 * len(json.dumps(runner)) + 4096


async def test_a_large_value_is_parsed_a_few_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 200 KB runner arriving in 100-character chunks: tries grow with the log of its size."""
    tries = 0
    decode = pages._DECODER.raw_decode

    def counted(text: str, at: int = 0) -> tuple[Any, int]:
        nonlocal tries
        tries += 1
        return decode(text, at)

    monkeypatch.setattr(pages._DECODER, "raw_decode", counted)
    text = json.dumps({"runners": [{"blob": "y" * 200_000}]})
    parts = [text[i : i + 100] for i in range(0, len(text), 100)]
    runners, _, _ = await _read_chunked(parts)
    assert runners == [{"blob": "y" * 200_000}]
    assert tries <= 30  # 2,000 chunks
