"""JSON to and from bytes on the hot paths (list pages, list entries, kept object bodies).

orjson, the field's fast JSON library: writing a list entry takes a tenth of the stdlib's time and
parsing a page of 1,000 runners a third (bench/RESULTS.md, "Lists at N = 3,000 and 10,000"). What
orjson refuses but JSON allows (an integer past 64 bits) goes through the stdlib, so no input is
read differently than before. Output is compact, keys in insertion order, like
`json.dumps(separators=(",", ":"), ensure_ascii=False)`.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def dumps(value: Any) -> bytes:
    try:
        return orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError is one
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def loads(data: bytes | str) -> Any:
    """Raises ValueError (json.JSONDecodeError) when `data` is not JSON."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)
