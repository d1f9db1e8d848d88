"""API failures as google.rpc.Status bodies with the gRPC-to-HTTP mapping of the contract (3.3).

Everything the simulator refuses is an ApiError; the HTTP layer only renders it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

# gRPC code number -> (name, HTTP status)
CODES: dict[int, tuple[str, int]] = {
    1: ("CANCELLED", 499),
    2: ("UNKNOWN", 500),
    3: ("INVALID_ARGUMENT", 400),
    4: ("DEADLINE_EXCEEDED", 504),
    5: ("NOT_FOUND", 404),
    6: ("ALREADY_EXISTS", 409),
    7: ("PERMISSION_DENIED", 403),
    8: ("RESOURCE_EXHAUSTED", 429),
    9: ("FAILED_PRECONDITION", 400),
    10: ("ABORTED", 409),
    11: ("OUT_OF_RANGE", 400),
    12: ("UNIMPLEMENTED", 501),
    13: ("INTERNAL", 500),
    14: ("UNAVAILABLE", 503),
    15: ("DATA_LOSS", 500),
    16: ("UNAUTHENTICATED", 401),
}

# The code an injected fault uses when only an HTTP status is given.
CODE_FOR_HTTP: dict[int, int] = {
    400: 3,
    401: 16,
    403: 7,
    404: 5,
    409: 10,
    429: 8,
    499: 1,
    500: 13,
    501: 12,
    503: 14,
    504: 4,
}

_TYPE = "type.googleapis.com/google.rpc."
RESOURCE_TYPE = "coreweave.sandbox.v1.ManagedRunner"


@dataclass
class ApiError(Exception):
    """A refused call: gRPC code, message, typed details and extra response headers."""

    code: int
    message: str
    details: list[dict[str, Any]] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    http_status: int | None = None

    def __post_init__(self) -> None:
        super().__init__(self.message)

    @property
    def status(self) -> int:
        return self.http_status or CODES.get(self.code, ("UNKNOWN", 500))[1]

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            out["details"] = self.details
        return out


@dataclass(frozen=True)
class Violation:
    """One BadRequest field violation."""

    field: str
    description: str


def invalid(violations: list[Violation], message: str | None = None) -> ApiError:
    first = violations[0]
    text = message or (
        f"{first.field}: {first.description}"
        + (f" (and {len(violations) - 1} more)" if len(violations) > 1 else "")
    )
    return ApiError(
        3,
        text,
        [
            {
                "@type": _TYPE + "BadRequest",
                "fieldViolations": [{"field": v.field, "description": v.description} for v in violations],
            }
        ],
    )


def invalid_field(field_path: str, description: str) -> ApiError:
    return invalid([Violation(field_path, description)])


def precondition(message: str, kind: str, subject: str, description: str) -> ApiError:
    return ApiError(
        9,
        message,
        [
            {
                "@type": _TYPE + "PreconditionFailure",
                "violations": [{"type": kind, "subject": subject, "description": description}],
            }
        ],
    )


def stale_etag(description: str) -> ApiError:
    return precondition(
        "managed_runner.etag is stale; reload the runner and retry",
        "ETAG",
        "managed_runner.etag",
        description,
    )


def _resource_info(runner_id: str, description: str) -> dict[str, Any]:
    return {
        "@type": _TYPE + "ResourceInfo",
        "resourceType": RESOURCE_TYPE,
        "resourceName": f"managedRunners/{runner_id}",
        "description": description,
    }


def not_found(runner_id: str) -> ApiError:
    msg = f"managed runner {runner_id!r} not found"
    return ApiError(5, msg, [_resource_info(runner_id, msg)])


def already_exists(runner_id: str, message: str) -> ApiError:
    return ApiError(6, message, [_resource_info(runner_id, message)])


def unauthenticated() -> ApiError:
    return ApiError(16, "missing or invalid bearer token")


def permission_denied(action: str = "SANDBOX_ADMIN") -> ApiError:
    return ApiError(7, f"the caller lacks the {action} permission")


def injected(
    status: int,
    message: str | None = None,
    code: int | None = None,
    retry_after: float | None = None,
) -> ApiError:
    """An error produced by fault injection; 429 carries QuotaFailure, RetryInfo and Retry-After."""
    grpc_code = code if code is not None else CODE_FOR_HTTP.get(status, 13 if status >= 500 else 3)
    name = CODES.get(grpc_code, ("UNKNOWN", 500))[0]
    err = ApiError(grpc_code, message or f"injected fault: {name}", http_status=status)
    if status == 429 or grpc_code == 8:
        delay = 1.0 if retry_after is None else retry_after
        err.details.append(
            {
                "@type": _TYPE + "QuotaFailure",
                "violations": [{"subject": "requests", "description": "request rate limit exceeded"}],
            }
        )
    if retry_after is not None or status == 429:
        delay = 1.0 if retry_after is None else retry_after
        seconds = int(delay)
        nanos = round((delay - seconds) * 1e9)
        err.details.append({"@type": _TYPE + "RetryInfo", "retryDelay": _duration(seconds, nanos)})
        err.headers["Retry-After"] = str(max(0, math.ceil(delay)))
    return err


def _duration(seconds: int, nanos: int) -> str:
    if nanos == 0:
        return f"{seconds}s"
    return f"{seconds}.{nanos:09d}".rstrip("0") + "s"
