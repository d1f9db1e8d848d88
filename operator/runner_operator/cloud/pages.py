"""A list page read one runner at a time, as its text arrives: neither the parsed page nor its text
ever exists whole.

`json.loads` of a page of 1,000 runners shaped like examples/managedrunner.yaml holds about 25 MB of
dicts and strings at once for a 4 MB response, and the allocators keep most of that peak after it
is freed (bench/RESULTS.md, "A list page one runner at a time"). Reading the response whole still
held its bytes and its text, about 8 MB at once for such a page, on every list (bench/RESULTS.md,
"List pages read as they arrive"). Here the top-level object is walked by hand as chunks arrive, each
value, including each element of the runner array, is parsed on its own by the stdlib's scanner
(`JSONDecoder.raw_decode`), and text already read is dropped: what is held is at most KEEP_READ and
one runner of text already read, the piece being read (client.TEXT_CHUNK, 64 KB or more) and about
two runners.
Only the top level is walked here: every value is still parsed by the stdlib.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator
from typing import Any, Final

from runner_operator.cloud import errors

ARRAYS = ("managedRunners", "runners")
"""The runner array's name: `managedRunners` as documented, `runners` tolerated (API spec, INFERRED #2)."""

KEEP_READ = 64 * 1024
"""Text already read is dropped once this much of it has piled up (dropping copies what is left)."""

_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")
_AFTER_VALUE = frozenset(" \t\n\r,]}:")
"""Characters that may follow a whole value (the empty string, the end of the text so far, may not)."""
_MORE: Final = object()
"""What the walk yields when it needs more text than has arrived."""

Walk = Generator[Any, None, None]


class _Text:
    """The part of the response not yet read, and whether the rest has arrived."""

    def __init__(self, text: str = "", *, whole: bool = False) -> None:
        self.text = text
        self.ended = whole
        self.whole = whole
        """Given whole: nothing is gained by dropping what was read (it only copies the rest)."""

    def drop_before(self, at: int) -> int:
        """Forget the text before `at` if enough has piled up; returns where `at` now is."""
        if at < KEEP_READ or self.whole:
            return at
        self.text = self.text[at:]
        return 0


class Page:
    """One list response: `Page(text)` for a whole one (iterate `runners()`), `Page()` for one that
    arrives in chunks (iterate `read(chunks)`), once. The other top-level fields are read after it.

    Malformed JSON raises errors.IncompatibleServer where it is met: runners before it have been
    yielded (a list that fails half-way is incomplete, which its caller already has to handle).
    """

    def __init__(self, text: str | None = None) -> None:
        self._text = _Text(text or "", whole=text is not None)
        self.fields: dict[str, Any] = {}
        """Top-level members other than the runner array, complete once the runners are exhausted."""
        self.array: str | None = None
        """Which of ARRAYS held the runners, if one did."""

    @property
    def next_page_token(self) -> object:
        return self.fields.get("nextPageToken")

    @property
    def held(self) -> int:
        """Characters of the response held now (read or not yet read)."""
        return len(self._text.text)

    def runners(self) -> Iterator[Any]:
        """The runners of a page given whole."""
        for item in self._walk():
            if item is _MORE:  # pragma: no cover - a whole page has ended: the walk never waits
                raise AssertionError("a whole page asked for more text")
            yield item

    async def read(self, chunks: AsyncIterator[str]) -> AsyncGenerator[Any, None]:
        """The runners of a page whose text arrives in `chunks`, each yielded once the text after it
        shows that it is whole (or the text has ended)."""
        source = self._text
        for item in self._walk():
            if item is not _MORE:
                yield item
                continue
            chunk = await anext(chunks, None)
            if chunk is None:
                source.ended = True
            else:
                source.text += chunk

    def _walk(self) -> Walk:
        src = self._text
        at = yield from _skip(src, 0)
        if not src.text:  # an empty body: no runners, no token
            return
        if (yield from _char(src, at)) != "{":
            yield from _value(src, at)  # not JSON at all raises that; a JSON value of another kind:
            raise errors.IncompatibleServer("response is not a JSON object")
        at = yield from _skip(src, at + 1)
        if (yield from _char(src, at)) == "}":
            yield from _end(src, at + 1)
            return
        while True:
            key, at = yield from _value(src, at)
            if not isinstance(key, str):
                raise _malformed()
            at = yield from _expect(src, (yield from _skip(src, at)), ":")
            at = yield from _skip(src, at)
            if key in ARRAYS and (yield from _char(src, at)) == "[":
                if self.array is not None:
                    raise errors.IncompatibleServer(f"list response has both {self.array} and {key}")
                self.array = key
                at = yield from _elements(src, at + 1)
            else:
                value, at = yield from _value(src, at)
                if key in ARRAYS and value is not None:
                    raise errors.IncompatibleServer("list response has no array of runners")
                self.fields[key] = value
            at = yield from _skip(src, at)
            if (yield from _char(src, at)) == ",":
                at = yield from _skip(src, at + 1)
                continue
            at = yield from _expect(src, at, "}")
            yield from _end(src, at)
            return


def _elements(src: _Text, at: int) -> Generator[Any, None, int]:
    """Yield each element of the array whose `[` is just before `at`; return the index after `]`."""
    at = yield from _skip(src, at)
    if (yield from _char(src, at)) == "]":
        return at + 1
    while True:
        item, at = yield from _value(src, at)
        yield item
        at = yield from _skip(src, src.drop_before(at))
        if (yield from _char(src, at)) == ",":
            at = yield from _skip(src, at + 1)
            continue
        return (yield from _expect(src, at, "]"))


def _value(src: _Text, at: int) -> Generator[Any, None, tuple[Any, int]]:
    """The JSON value at `at` and the index after it, once enough text has arrived to be sure.

    A value is taken once the character after it can end a value (whitespace, `,`, `]`, `}`, `:`) or
    the text has ended: a number cut by a chunk (`1.` of `1.5`, `1e` of `1e5`) parses as a shorter
    one. One that does not parse yet, or may go on, is tried again once the text after `at` has at
    least doubled: a large value is parsed a few times, not once per chunk.
    """
    while True:
        try:
            value, end = _DECODER.raw_decode(src.text, at)
        except json.JSONDecodeError:
            if src.ended:
                raise _malformed() from None
        else:
            if src.ended or src.text[end : end + 1] in _AFTER_VALUE:
                return value, end
        wanted = len(src.text) + max(len(src.text) - at, 1)
        while len(src.text) < wanted and not src.ended:
            yield _MORE


def _skip(src: _Text, at: int) -> Generator[Any, None, int]:
    """The index of the first character at or after `at` that is not whitespace (or the end)."""
    while True:
        match = _SPACE.match(src.text, at)
        end = match.end() if match else at
        if end < len(src.text) or src.ended:
            return end
        yield _MORE


def _char(src: _Text, at: int) -> Generator[Any, None, str]:
    """The character at `at`, "" at the end of the text."""
    while at >= len(src.text) and not src.ended:
        yield _MORE
    return src.text[at : at + 1]


def _expect(src: _Text, at: int, char: str) -> Generator[Any, None, int]:
    if (yield from _char(src, at)) != char:
        raise _malformed()
    return at + 1


def _end(src: _Text, at: int) -> Generator[Any, None, None]:
    """Nothing but whitespace may follow the page's object."""
    if (yield from _skip(src, at)) != len(src.text):
        raise _malformed()


def _malformed() -> errors.IncompatibleServer:
    return errors.IncompatibleServer("response is not JSON")
