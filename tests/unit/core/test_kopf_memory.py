"""What the handler layer does to keep kopf's per-object memory small."""

from __future__ import annotations

from typing import Any, cast

import kopf

from runner_operator import handlers


def test_kopf_bodies_lose_their_managed_fields() -> None:
    raw: dict[str, Any] = {
        "metadata": {"name": "r", "uid": "u", "managedFields": [{"manager": "kubectl", "fieldsV1": {}}]},
        "spec": {"runnerId": "x"},
    }
    body = kopf.Body(_raw_body(raw))
    assert handlers.drop_managed_fields(body), "kopf's Body no longer wraps a plain dict: revisit this"
    assert "managedFields" not in raw["metadata"]
    assert "managedFields" not in body.metadata
    assert body.metadata["name"] == "r"
    assert body.spec["runnerId"] == "x"


def test_a_body_without_managed_fields_is_left_as_it_is() -> None:
    raw: dict[str, Any] = {"metadata": {"name": "r"}}
    assert handlers.drop_managed_fields(kopf.Body(_raw_body(raw)))
    assert raw == {"metadata": {"name": "r"}}


def _raw_body(raw: dict[str, Any]) -> kopf.RawBody:
    """The API server's JSON as kopf's type for it; kopf's RawMeta does not list managedFields."""
    return cast(kopf.RawBody, raw)
