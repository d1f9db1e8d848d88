"""The one place where API failures become exceptions, classified by what the caller should do next.

Messages carry the server's text (truncated) and never the token, request bodies or headers.
"""

from __future__ import annotations

import email.utils
import json
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:  # only parses a response it is given: no HTTP here, so the pure core may import it
    import httpx

MAX_MESSAGE = 256

# gRPC status numbers -> canonical names (google.rpc.Code).
CODE_NAMES: dict[int, str] = {
    0: "OK",
    1: "CANCELLED",
    2: "UNKNOWN",
    3: "INVALID_ARGUMENT",
    4: "DEADLINE_EXCEEDED",
    5: "NOT_FOUND",
    6: "ALREADY_EXISTS",
    7: "PERMISSION_DENIED",
    8: "RESOURCE_EXHAUSTED",
    9: "FAILED_PRECONDITION",
    10: "ABORTED",
    11: "OUT_OF_RANGE",
    12: "UNIMPLEMENTED",
    13: "INTERNAL",
    14: "UNAVAILABLE",
    15: "DATA_LOSS",
    16: "UNAUTHENTICATED",
}


class CloudError(Exception):
    """Base of every API failure.

    `retryable` answers the reconciler's question: may trying again later, without a spec change, succeed?
    The client itself retries only `Unavailable` (which includes `RateLimited`).
    """

    retryable: ClassVar[bool] = False

    def __init__(self, message: str, *, code: str = "UNKNOWN", http_status: int | None = None) -> None:
        self.message = _truncate(message)
        self.code = code
        self.http_status = http_status
        super().__init__(self.message)

    def __str__(self) -> str:
        where = f" (HTTP {self.http_status})" if self.http_status is not None else ""
        return f"{self.code}{where}: {self.message}"


class NotFound(CloudError):
    """The API's own NOT_FOUND (a google.rpc.Status body with code 5): the only evidence of absence.

    `resource_name` comes from a ResourceInfo detail when the server names what it did not find.
    """

    def __init__(
        self,
        message: str,
        *,
        code: str = "NOT_FOUND",
        http_status: int | None = None,
        resource_name: str | None = None,
    ) -> None:
        super().__init__(message, code=code, http_status=http_status)
        self.resource_name = resource_name

    def names(self, runner_id: str) -> bool:
        """Whether this answer is about `runner_id` (an answer naming nothing is taken as about it)."""
        name = self.resource_name
        return name is None or name == runner_id or name.endswith(f"/{runner_id}")


class Misrouted(CloudError):
    """A 404 that is not the API's NOT_FOUND: a proxy, a wrong base path or an ingress without a route.

    It proves nothing about the runner, so it is never read as "gone"; someone must fix the endpoint.
    """

    retryable = True


class AlreadyExists(CloudError):
    pass


class InvalidArgument(CloudError):
    """The request was rejected as invalid; `field_violations` holds (field, description) pairs."""

    def __init__(
        self,
        message: str,
        *,
        code: str = "INVALID_ARGUMENT",
        http_status: int | None = None,
        field_violations: tuple[tuple[str, str], ...] = (),
    ) -> None:
        super().__init__(message, code=code, http_status=http_status)
        self.field_violations = field_violations


class FailedPrecondition(CloudError):
    """The runner is not in a state that allows the call; it may be later."""

    retryable = True


class StaleEtag(FailedPrecondition):
    """The policy changed since it was read: re-read, recompute, then update (never resend blindly)."""


class Unauthenticated(CloudError):
    retryable = True  # tokens get rotated; retry slowly


class PermissionDenied(CloudError):
    retryable = True  # access policies get fixed outside the spec


class Unavailable(CloudError):
    """Transient: transport error, timeout or server fault. The client retries these briefly."""

    retryable = True


class RateLimited(Unavailable):
    """HTTP 429 or the local request budget ran dry; `retry_after` is seconds when known."""

    def __init__(
        self,
        message: str,
        *,
        code: str = "RESOURCE_EXHAUSTED",
        http_status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, code=code, http_status=http_status)
        self.retry_after = retry_after


class Unimplemented(CloudError):
    pass


class IncompatibleServer(CloudError):
    """The server answered with something this client cannot use (e.g. a runner without `spec`)."""

    def __init__(self, message: str, *, http_status: int | None = None) -> None:
        super().__init__(message, code="INCOMPATIBLE_SERVER", http_status=http_status)


_BY_CODE: dict[str, type[CloudError]] = {
    "CANCELLED": Unavailable,  # server-side cancellation; a client's own 499 stays non-retryable below
    "UNKNOWN": Unavailable,
    "INVALID_ARGUMENT": InvalidArgument,
    "OUT_OF_RANGE": InvalidArgument,
    "DEADLINE_EXCEEDED": Unavailable,
    "NOT_FOUND": NotFound,
    "ALREADY_EXISTS": AlreadyExists,
    "PERMISSION_DENIED": PermissionDenied,
    "RESOURCE_EXHAUSTED": RateLimited,
    "FAILED_PRECONDITION": FailedPrecondition,
    "ABORTED": StaleEtag,
    "UNIMPLEMENTED": Unimplemented,
    "INTERNAL": Unavailable,
    "UNAVAILABLE": Unavailable,
    "DATA_LOSS": Unavailable,
    "UNAUTHENTICATED": Unauthenticated,
}

_CODE_BY_HTTP: dict[int, str] = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ALREADY_EXISTS",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def from_response(
    response: httpx.Response,
    *,
    policy_update: bool = False,
    now: Callable[[], float] = time.time,
) -> CloudError:
    """Classify a failed response from its google.rpc.Status body, falling back to the HTTP status.

    FAILED_PRECONDITION is a stale etag when its PreconditionFailure detail names the etag, or, without
    details, on a policy update. `now` (wall clock) resolves HTTP-date Retry-After.
    """
    status = response.status_code
    body = _status_body(response)
    code = _code_name(body.get("code"), status)
    message = body.get("message") if isinstance(body.get("message"), str) else None
    text = message or response.reason_phrase or f"HTTP {status}"
    details = [d for d in body.get("details", ()) or () if isinstance(d, dict)] if body else []

    if status == 404 and not _is_rpc_status(body, 5):
        return Misrouted(
            f"HTTP 404 without an API status body ({text}): check the API endpoint and any proxy in between",
            code="MISROUTED",
            http_status=status,
        )
    cls = _BY_CODE.get(code, CloudError)
    if issubclass(cls, Unavailable) and cls is not RateLimited and 400 <= status < 500:
        cls = CloudError  # a 4xx other than 429 is never transient, whatever the body says
    if cls is FailedPrecondition and _is_stale_etag(details, policy_update):
        cls = StaleEtag
    if cls is InvalidArgument:
        return InvalidArgument(
            text, code=code, http_status=status, field_violations=_field_violations(details)
        )
    if cls is NotFound:
        return NotFound(text, code=code, http_status=status, resource_name=_resource_name(details))
    if cls is RateLimited:
        retry_after = _retry_after_header(response.headers.get("retry-after"), now)
        if retry_after is None:
            retry_after = _retry_info(details)
        return RateLimited(text, code=code, http_status=status, retry_after=retry_after)
    return cls(text, code=code, http_status=status)


def _truncate(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"


def _status_body(response: httpx.Response) -> dict[str, Any]:
    try:
        body = json.loads(response.content)
    except ValueError:
        return {}
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        body = body["error"]  # some gateways wrap the status as {"error": {...}}
    return body if isinstance(body, dict) else {}


def _is_rpc_status(body: dict[str, Any], number: int) -> bool:
    """A google.rpc.Status body carrying this code (as the number or its canonical name)."""
    code = body.get("code")
    if isinstance(code, bool):
        return False
    return code == number or (isinstance(code, str) and code.upper() == CODE_NAMES[number])


def _resource_name(details: list[dict[str, Any]]) -> str | None:
    for detail in _of_type(details, "ResourceInfo"):
        name = detail.get("resourceName", detail.get("resource_name"))
        if isinstance(name, str) and name:
            return name
    return None


def _code_name(code: object, http_status: int) -> str:
    if isinstance(code, int) and not isinstance(code, bool) and code in CODE_NAMES and code != 0:
        return CODE_NAMES[code]
    if isinstance(code, str) and code.upper() in _BY_CODE:
        return code.upper()
    if http_status in _CODE_BY_HTTP:
        return _CODE_BY_HTTP[http_status]
    return "INTERNAL" if http_status >= 500 else "UNKNOWN"


def _of_type(details: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [d for d in details if str(d.get("@type", "")).endswith(f"google.rpc.{name}")]


def _is_stale_etag(details: list[dict[str, Any]], policy_update: bool) -> bool:
    """A PreconditionFailure detail decides when present; otherwise a policy update's failure is."""
    if _of_type(details, "PreconditionFailure"):
        return _mentions_etag(details)
    return policy_update


def _mentions_etag(details: list[dict[str, Any]]) -> bool:
    for detail in _of_type(details, "PreconditionFailure"):
        for violation in detail.get("violations", ()) or ():
            if isinstance(violation, dict) and (
                str(violation.get("type", "")).upper() == "ETAG"
                or "etag" in str(violation.get("subject", ""))
            ):
                return True
    return False


def _field_violations(details: list[dict[str, Any]]) -> tuple[tuple[str, str], ...]:
    found: list[tuple[str, str]] = []
    for detail in _of_type(details, "BadRequest"):
        for violation in detail.get("fieldViolations", detail.get("field_violations", ())) or ():
            if isinstance(violation, dict):
                found.append(
                    (str(violation.get("field", "")), _truncate(str(violation.get("description", ""))))
                )
    return tuple(found)


def _retry_after_header(value: str | None, now: Callable[[], float]) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now())


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s*$")


def _retry_info(details: list[dict[str, Any]]) -> float | None:
    for detail in _of_type(details, "RetryInfo"):
        delay = detail.get("retryDelay", detail.get("retry_delay"))
        if isinstance(delay, str) and (match := _DURATION.match(delay)):
            return float(match.group(1))
        if isinstance(delay, dict):  # {"seconds": ..., "nanos": ...} from non-JSON-mapped encoders
            return float(delay.get("seconds", 0) or 0) + float(delay.get("nanos", 0) or 0) / 1e9
    return None
