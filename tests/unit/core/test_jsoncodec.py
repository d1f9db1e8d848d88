"""jsoncodec reads and writes what the stdlib does, faster, including what orjson alone refuses."""

from __future__ import annotations

import json
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def _runner(i: int) -> bytes:
    meta = {"name": f"runner-{i}", "uid": f"6f1c2a4e-0000-4000-8000-{i:012d}", "resourceVersion": str(i)}
    spec = {"runnerId": f"runner-{i}", "zone": "US-EAST-04A", "policy": {"egress": [{"cidr": "10.0.0.0/8"}]}}
    status = {"installStatus": "INSTALLED", "connectionStatus": "CONNECTED", "observedGeneration": 1}
    return jsoncodec.dumps({"metadata": meta, "spec": spec, "status": status})


def test_the_packer_is_primed_with_its_first_document() -> None:
    packer = jsoncodec.Packer()
    first = packer.compress(_runner(0))
    packed = [packer.compress(_runner(i)) for i in range(1, 50)]
    assert [packer.decompress(p) for p in packed] == [_runner(i) for i in range(1, 50)]
    assert packer.decompress(first) == _runner(0)
    alone = [zlib.compress(_runner(i), 1) for i in range(1, 50)]
    assert sum(map(len, packed)) * 3 < sum(map(len, alone)), "a sibling is mostly found in the primer"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=3000), min_size=1, max_size=8))
def test_whatever_is_packed_unpacks_to_itself(documents: list[bytes]) -> None:
    """Any bytes (the first one, primer or not, long or empty), in any order, read back the same."""
    packer = jsoncodec.Packer()
    packed = [packer.compress(d) for d in documents]
    assert [packer.decompress(p) for p in reversed(packed)] == list(reversed(documents))


def test_a_primer_longer_than_zlibs_window_keeps_its_end() -> None:
    packer = jsoncodec.Packer()
    big = b"x" * (jsoncodec.WINDOW + 100) + _runner(0)
    assert packer.decompress(packer.compress(big)) == big
    assert packer.decompress(packer.compress(_runner(1))) == _runner(1)


def test_nothing_unpacks_before_something_was_packed() -> None:
    with pytest.raises(ValueError, match="nothing was packed"):
        jsoncodec.Packer().decompress(zlib.compress(b"{}"))
