"""What the Kubernetes API server said when it refused a request, in one line.

Shared by the handlers (status and finalizer writes) and leader election (Leases): a refusal is
logged with the server's own message, which names the verb and resource RBAC refused, and never
with the client's exception text, which carries the response headers.
"""

from __future__ import annotations

import contextlib
import json


def describe(exc: BaseException) -> str:
    """`HTTP <status>: <message>` for an API server answer, the exception's type and text otherwise."""
    status = getattr(exc, "status", None)
    if status is None:
        return f"{type(exc).__name__}: {exc}"
    body = getattr(exc, "body", None)
    text = body.decode(errors="replace") if isinstance(body, bytes) else str(body or "")
    with contextlib.suppress(ValueError, AttributeError):
        text = str(json.loads(text).get("message") or text)
    return f"HTTP {status}: {text}" if text else f"HTTP {status}"
