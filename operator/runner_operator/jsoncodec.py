"""JSON to and from bytes on the hot paths: list entries and the kept object bodies.

orjson, the field's fast JSON library: writing a list entry takes a tenth of the stdlib's time
(bench/snapshot_memory.py). What orjson refuses but JSON allows (an integer past 64 bits) goes
through the stdlib, so no input is read differently. Output is compact, keys in insertion order,
like `json.dumps(separators=(",", ":"), ensure_ascii=False)`. `loads` is for documents of a few KB;
a list page is parsed with the stdlib (cloud/client.py says why).
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
