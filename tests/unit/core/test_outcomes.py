"""The failure table: which API answer the user sees as which reason, and who must act."""

from __future__ import annotations

import pytest

from runner_operator import outcomes, reasons
from runner_operator.cloud import errors
from runner_operator.outcomes import CredentialsProblem, classify
from runner_operator.reasons import Reason


@pytest.mark.parametrize(
    ("exc", "reason", "terminal", "person"),
    [
        (
            errors.RateLimited("slow down", code="RESOURCE_EXHAUSTED", retry_after=7),
            "RateLimited",
            False,
            False,
        ),
        (errors.Unavailable("down", code="UNAVAILABLE"), "ApiUnavailable", False, False),
        (errors.StaleEtag("etag", code="FAILED_PRECONDITION"), "StaleEtag", False, False),
        (
            errors.FailedPrecondition("not now", code="FAILED_PRECONDITION"),
            "FailedPrecondition",
            False,
            False,
        ),
        (errors.NotFound("gone meanwhile", code="NOT_FOUND"), "NotFound", False, False),
        (errors.AlreadyExists("exists", code="ALREADY_EXISTS"), "AlreadyExists", False, False),
        (errors.Unauthenticated("no", code="UNAUTHENTICATED"), "CredentialsRejected", False, True),
        (errors.PermissionDenied("no", code="PERMISSION_DENIED"), "PermissionDenied", False, True),
        (errors.Misrouted("bare 404", code="MISROUTED"), "EndpointMisrouted", False, True),
        (errors.InvalidArgument("bad", code="INVALID_ARGUMENT"), "InvalidSpec", True, True),
        (errors.IncompatibleServer("what"), "IncompatibleServer", True, True),
        (errors.Unimplemented("no route", code="UNIMPLEMENTED"), "Unimplemented", True, True),
        (CredentialsProblem(Reason.SECRET_NOT_FOUND, "no Secret x"), "SecretNotFound", False, True),
        (RuntimeError("bug"), "InternalError", False, False),
    ],
)
def test_every_failure_has_one_reason_and_one_owner(
    exc: Exception, reason: str, terminal: bool, person: bool
) -> None:
    failure = classify(exc)
    assert (failure.reason, failure.terminal, failure.needs_person) == (reason, terminal, person)
    assert failure.message
    assert failure.retry_after == (7 if reason == "RateLimited" else None)


def test_every_reason_of_the_failure_table_is_catalogued() -> None:
    assert {reason for _, reason, _, _ in outcomes.FAILURES} <= set(reasons.REASONS)


def test_messages_say_what_to_check() -> None:
    bad = errors.InvalidArgument(
        "bad", code="INVALID_ARGUMENT", field_violations=(("spec.zone", "unknown zone"),)
    )
    assert classify(bad).message == "the API rejected the spec: spec.zone: unknown zone"
    assert "credentials Secret" in classify(errors.Unauthenticated("x", code="UNAUTHENTICATED")).message
    assert "SANDBOX_ADMIN" in classify(errors.PermissionDenied("x", code="PERMISSION_DENIED")).message
