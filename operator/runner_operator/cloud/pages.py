"""A list page read one runner at a time: the parsed page never exists whole.

`json.loads` of a page of 1,000 runners shaped like examples/managedrunner.yaml holds about 25 MB of
dicts and strings at once for a 4 MB response, and the allocators keep most of that peak after it
is freed (bench/RESULTS.md, "A list page one runner at a time"). Here the top-level object is walked
by hand and each value, including each element of the runner array, is parsed on its own by the
stdlib's scanner (`JSONDecoder.raw_decode`), so one runner's dicts are alive at a time beside the
page's text. Only the top level is walked here: every value is still parsed by the stdlib.
"""

from __future__ import annotations

import json
import re
from collections.abc import Generator, Iterator
from typing import Any

from runner_operator.cloud import errors

ARRAYS = ("managedRunners", "runners")
"""The runner array's name: `managedRunners` as documented, `runners` tolerated (API spec, INFERRED #2)."""

_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")


class Page:
    """One list response. Iterate `runners()` once; the other top-level fields are read after it.

    Malformed JSON raises errors.IncompatibleServer where it is met: runners before it have been
    yielded (a list that fails half-way is incomplete, which its caller already has to handle).
    """

    def __init__(self, text: str) -> None:
        self._text = text
        self.fields: dict[str, Any] = {}
        """Top-level members other than the runner array, complete once `runners()` is exhausted."""
        self.array: str | None = None
        """Which of ARRAYS held the runners, if one did."""

    @property
    def next_page_token(self) -> object:
        return self.fields.get("nextPageToken")

    def runners(self) -> Iterator[Any]:
        text = self._text
        if not text:  # an empty body: no runners, no token
            return
        at = _skip(text, 0)
        if not text.startswith("{", at):
            _value(text, at)  # not JSON at all raises that; a JSON value of another kind:
            raise errors.IncompatibleServer("response is not a JSON object")
        at = _skip(text, at + 1)
        if text.startswith("}", at):
            return self._end(text, at + 1)
        while True:
            key, at = _value(text, at)
            if not isinstance(key, str):
                raise _malformed()
            at = _expect(text, _skip(text, at), ":")
            at = _skip(text, at)
            if key in ARRAYS and text.startswith("[", at):
                if self.array is not None:
                    raise errors.IncompatibleServer(f"list response has both {self.array} and {key}")
                self.array = key
                at = yield from _elements(text, at + 1)
            else:
                value, at = _value(text, at)
                if key in ARRAYS and value is not None:
                    raise errors.IncompatibleServer("list response has no array of runners")
                self.fields[key] = value
            at = _skip(text, at)
            if text.startswith(",", at):
                at = _skip(text, at + 1)
                continue
            at = _expect(text, at, "}")
            return self._end(text, at)

    def _end(self, text: str, at: int) -> None:
        if _skip(text, at) != len(text):
            raise _malformed()


def _elements(text: str, at: int) -> Generator[Any, None, int]:
    """Yield each element of the array whose `[` is just before `at`; return the index after `]`."""
    at = _skip(text, at)
    if text.startswith("]", at):
        return at + 1
    while True:
        item, at = _value(text, at)
        yield item
        at = _skip(text, at)
        if text.startswith(",", at):
            at = _skip(text, at + 1)
            continue
        return _expect(text, at, "]")


def _value(text: str, at: int) -> tuple[Any, int]:
    try:
        return _DECODER.raw_decode(text, at)
    except json.JSONDecodeError:
        raise _malformed() from None


def _skip(text: str, at: int) -> int:
    match = _SPACE.match(text, at)
    return match.end() if match else at


def _expect(text: str, at: int, char: str) -> int:
    if not text.startswith(char, at):
        raise _malformed()
    return at + 1


def _malformed() -> errors.IncompatibleServer:
    return errors.IncompatibleServer("response is not JSON")
