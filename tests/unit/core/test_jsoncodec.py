"""jsoncodec reads and writes what the stdlib does, faster, including what orjson alone refuses."""

from __future__ import annotations

import json

import pytest

from runner_operator import jsoncodec


def test_it_writes_compact_json_in_key_order_as_utf8() -> None:
    value = {"b": 1, "a": [True, None, 1.5], "name": "Zoë"}
    assert jsoncodec.dumps(value) == json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    assert jsoncodec.loads(jsoncodec.dumps(value)) == value


def test_a_number_past_64_bits_goes_through_the_stdlib_both_ways() -> None:
    value = {"count": 2**70, "small": -(2**63)}
    assert jsoncodec.loads(jsoncodec.dumps(value)) == value
    assert jsoncodec.loads(b'{"count": 1180591620717411303424}') == {"count": 2**70}


def test_what_is_not_json_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="Expecting"):
        jsoncodec.loads(b"{not json")
