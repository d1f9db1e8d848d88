"""One line per refusal, with the API server's own message and nothing of the response headers."""

from __future__ import annotations

import json

import pytest

from runner_operator import kubeerrors


class Refused(Exception):
    """The shape of kubernetes.client.ApiException that matters here: status, body, headers."""

    def __init__(self, status: int, body: bytes | str | None) -> None:
        super().__init__("(403)\nReason: Forbidden\nHTTP response headers: Authorization: secret")
        self.status = status
        self.body = body


FORBIDDEN = 'leases.coordination.k8s.io is forbidden: cannot list resource "leases"'


@pytest.mark.parametrize(
    ("exc", "line"),
    [
        pytest.param(
            Refused(403, json.dumps({"message": FORBIDDEN})), f"HTTP 403: {FORBIDDEN}", id="str-body"
        ),
        pytest.param(
            Refused(403, json.dumps({"message": FORBIDDEN}).encode()),
            f"HTTP 403: {FORBIDDEN}",
            id="bytes-body",
        ),
        pytest.param(
            Refused(409, json.dumps({"kind": "Status"})), 'HTTP 409: {"kind": "Status"}', id="no-message"
        ),
        pytest.param(
            Refused(502, "<html>bad gateway</html>"), "HTTP 502: <html>bad gateway</html>", id="not-json"
        ),
        pytest.param(Refused(500, json.dumps(["a"])), 'HTTP 500: ["a"]', id="json-not-an-object"),
        pytest.param(Refused(504, None), "HTTP 504", id="no-body"),
        pytest.param(
            ConnectionResetError("peer reset"), "ConnectionResetError: peer reset", id="not-an-answer"
        ),
    ],
)
def test_a_refusal_is_one_line_with_the_servers_message(exc: BaseException, line: str) -> None:
    said = kubeerrors.describe(exc)
    assert said == line
    assert "\n" not in said
    assert "secret" not in said
