"""errors.from_response: one classification for every status body and HTTP code."""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

import httpx
import pytest

from runner_operator.cloud import errors


def _response(status: int, body: Any = None, headers: dict[str, str] | None = None) -> httpx.Response:
    if isinstance(body, bytes):
        return httpx.Response(status, content=body, headers=headers)
    return httpx.Response(status, json=body, headers=headers)


def _status(code: int, message: str = "server says no", details: list[Any] | None = None) -> dict[str, Any]:
    return {"code": code, "message": message, "details": details or []}


@pytest.mark.parametrize(
    ("status", "body", "expected", "code", "retryable"),
    [
        pytest.param(
            400, _status(3), errors.InvalidArgument, "INVALID_ARGUMENT", False, id="invalid-argument"
        ),
        pytest.param(400, _status(11), errors.InvalidArgument, "OUT_OF_RANGE", False, id="bad-page-token"),
        pytest.param(
            400, _status(9), errors.FailedPrecondition, "FAILED_PRECONDITION", True, id="precondition"
        ),
        pytest.param(401, _status(16), errors.Unauthenticated, "UNAUTHENTICATED", True, id="unauthenticated"),
        pytest.param(
            403, _status(7), errors.PermissionDenied, "PERMISSION_DENIED", True, id="permission-denied"
        ),
        pytest.param(404, _status(5), errors.NotFound, "NOT_FOUND", False, id="not-found"),
        pytest.param(409, _status(6), errors.AlreadyExists, "ALREADY_EXISTS", False, id="already-exists"),
        pytest.param(409, _status(10), errors.StaleEtag, "ABORTED", True, id="aborted-is-stale-etag"),
        pytest.param(429, _status(8), errors.RateLimited, "RESOURCE_EXHAUSTED", True, id="rate-limited"),
        pytest.param(500, _status(13), errors.Unavailable, "INTERNAL", True, id="internal"),
        pytest.param(500, _status(2), errors.Unavailable, "UNKNOWN", True, id="unknown-code"),
        pytest.param(501, _status(12), errors.Unimplemented, "UNIMPLEMENTED", False, id="unimplemented"),
        pytest.param(503, _status(14), errors.Unavailable, "UNAVAILABLE", True, id="unavailable"),
        pytest.param(504, _status(4), errors.Unavailable, "DEADLINE_EXCEEDED", True, id="deadline"),
        pytest.param(502, b"<html>bad gateway</html>", errors.Unavailable, "INTERNAL", True, id="html-5xx"),
        pytest.param(404, b"", errors.Misrouted, "MISROUTED", True, id="empty-404-is-not-absence"),
        pytest.param(
            404, b"404 page not found", errors.Misrouted, "MISROUTED", True, id="proxy-404-is-not-absence"
        ),
        pytest.param(404, _status(13), errors.Misrouted, "MISROUTED", True, id="404-other-code"),
        pytest.param(404, {"error": _status(5)}, errors.NotFound, "NOT_FOUND", False, id="wrapped-not-found"),
        pytest.param(501, None, errors.Unimplemented, "UNIMPLEMENTED", False, id="bare-501"),
        pytest.param(418, b"teapot", errors.CloudError, "UNKNOWN", False, id="unmapped-4xx"),
        pytest.param(400, _status(14), errors.CloudError, "UNAVAILABLE", False, id="4xx-never-transient"),
        pytest.param(
            404, {"code": "NOT_FOUND", "message": "x"}, errors.NotFound, "NOT_FOUND", False, id="code-name"
        ),
        pytest.param(
            403, {"error": _status(7)}, errors.PermissionDenied, "PERMISSION_DENIED", True, id="wrapped"
        ),
    ],
)
def test_classification(
    status: int, body: Any, expected: type[errors.CloudError], code: str, retryable: bool
) -> None:
    error = errors.from_response(_response(status, body))
    assert type(error) is expected
    assert error.code == code
    assert error.http_status == status
    assert error.retryable is retryable


def test_field_violations_are_collected() -> None:
    detail = {
        "@type": "type.googleapis.com/google.rpc.BadRequest",
        "fieldViolations": [{"field": "identity.zone", "description": "must be lowercase"}],
    }
    error = errors.from_response(_response(400, _status(3, details=[detail])))
    assert isinstance(error, errors.InvalidArgument)
    assert error.field_violations == (("identity.zone", "must be lowercase"),)


def test_precondition_naming_the_etag_is_stale_etag() -> None:
    detail = {
        "@type": "type.googleapis.com/google.rpc.PreconditionFailure",
        "violations": [{"type": "ETAG", "subject": "managed_runner.etag", "description": "stale"}],
    }
    assert isinstance(errors.from_response(_response(400, _status(9, details=[detail]))), errors.StaleEtag)


def test_precondition_on_a_policy_update_is_stale_etag() -> None:
    error = errors.from_response(_response(400, _status(9)), policy_update=True)
    assert isinstance(error, errors.StaleEtag)


@pytest.mark.parametrize(
    ("headers", "details", "expected"),
    [
        pytest.param({"Retry-After": "3"}, [], 3.0, id="header-seconds"),
        pytest.param({"Retry-After": "-4"}, [], 0.0, id="negative-clamped"),
        pytest.param(
            {}, [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1.5s"}], 1.5, id="info"
        ),
        pytest.param(
            {"Retry-After": "2"},
            [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "9s"}],
            2.0,
            id="header-wins",
        ),
        pytest.param({"Retry-After": "soon"}, [], None, id="garbage-ignored"),
        pytest.param({}, [], None, id="unknown"),
    ],
)
def test_rate_limit_delay(headers: dict[str, str], details: list[Any], expected: float | None) -> None:
    error = errors.from_response(_response(429, _status(8, details=details), headers))
    assert isinstance(error, errors.RateLimited)
    assert error.retry_after == expected


def test_retry_after_http_date_uses_the_wall_clock() -> None:
    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    later = format_datetime(datetime(2026, 1, 1, 12, 0, 30, tzinfo=UTC), usegmt=True)
    error = errors.from_response(_response(429, None, {"Retry-After": later}), now=now.timestamp)
    assert isinstance(error, errors.RateLimited)
    assert error.retry_after == pytest.approx(30.0)


def test_message_keeps_server_text_truncated() -> None:
    error = errors.from_response(_response(400, _status(3, message="x" * 1000)))
    assert len(error.message) <= errors.MAX_MESSAGE
    assert str(error).startswith("INVALID_ARGUMENT (HTTP 400): xxx")


def test_message_falls_back_to_reason_phrase() -> None:
    assert errors.from_response(_response(503, b"")).message == "Service Unavailable"


def _not_found_naming(name: str) -> dict[str, Any]:
    info = {"@type": "type.googleapis.com/google.rpc.ResourceInfo", "resourceName": name}
    return _status(5, details=[info])


@pytest.mark.parametrize(
    ("name", "about"),
    [
        pytest.param("managedRunners/r1", True, id="names-the-runner"),
        pytest.param("r1", True, id="bare-id"),
        pytest.param("managedRunners/r2", False, id="names-another-runner"),
        pytest.param("routes/v1", False, id="names-a-route"),
    ],
)
def test_not_found_is_about_the_runner_it_names(name: str, about: bool) -> None:
    error = errors.from_response(_response(404, _not_found_naming(name)))
    assert isinstance(error, errors.NotFound)
    assert error.names("r1") is about
