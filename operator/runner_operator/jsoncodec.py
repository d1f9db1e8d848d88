"""JSON to and from bytes on the hot paths, and packed: list entries and the kept object bodies.

orjson, the field's fast JSON library: writing a list entry takes a tenth of the stdlib's time
(bench/snapshot_memory.py). What orjson refuses but JSON allows (an integer past 64 bits) goes
through the stdlib, so no input is read differently. Output is compact, keys in insertion order,
like `json.dumps(separators=(",", ":"), ensure_ascii=False)`. `loads` is for documents of a few KB;
a list page is parsed with the stdlib (cloud/client.py says why).
"""

from __future__ import annotations

import json
import zlib
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


WINDOW = 32 * 1024
"""zlib reads at most this much of a preset dictionary (its window)."""


class Packer:
    """zlib at level 1 with a preset dictionary: the first document this packer compresses.

    Kept documents of one kind share their keys and, in a fleet made from one template, most of
    their values, and a few KB is too short for zlib to find that inside one document: a
    ManagedRunner shaped like examples/managedrunner.yaml packs to about 85 bytes primed with
    another, against 1,587 alone. The dictionary never changes once set, so everything packed stays
    readable; a document unlike the first still packs (about as well as without a dictionary).
    """

    def __init__(self) -> None:
        self._primer: bytes | None = None

    def compress(self, raw: bytes) -> bytes:
        if self._primer is None:
            self._primer = raw[-WINDOW:]
        packing = zlib.compressobj(1, zdict=self._primer)
        return packing.compress(raw) + packing.flush()

    def decompress(self, packed: bytes) -> bytes:
        if self._primer is None:
            raise ValueError("nothing was packed here")
        unpacking = zlib.decompressobj(zdict=self._primer)
        return unpacking.decompress(packed) + unpacking.flush()
