"""Test doubles for the cloud client: an in-memory API for httpx.MockTransport (clock: tests/clock.py)."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.clock import FakeClock

__all__ = ["BASE_URL", "PREFIX", "TOKEN", "Body", "FakeApi", "FakeClock", "list_page", "runner_json"]

BASE_URL = "https://api.test"
TOKEN = "CW-SECRET-test-token-value"
PREFIX = "/v1/sandbox/managedRunners"


def runner_json(runner_id: str = "prod-1", **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "identity": {
            "runnerId": runner_id,
            "runnerGroupId": "default",
            "zone": "us-east-04a",
            "clusterId": "00000000-0000-4000-8000-000000000001",
            "clusterName": "prod-east",
        },
        "spec": {"releaseChannel": "RELEASE_CHANNEL_STABLE"},
        "policy": {},
        "etag": "e1",
        "installStatus": "RUNNER_INSTALL_STATUS_PENDING",
    }
    body.update(extra)
    return body


@dataclass
class Fault:
    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    error: Exception | None = None


class FakeApi:
    """Just enough of the ManagedRunner REST surface to exercise the client; records every request."""

    def __init__(self, page_size: int = 2, list_key: str = "managedRunners") -> None:
        self.runners: dict[str, dict[str, Any]] = {}
        self.requests: list[httpx.Request] = []
        self.faults: deque[Fault] = deque()
        self.page_size = page_size
        self.list_key = list_key

    def fail_next(
        self,
        status: int,
        times: int = 1,
        *,
        code: int | None = None,
        message: str = "injected",
        details: list[dict[str, Any]] | None = None,
        headers: dict[str, str] | None = None,
        error: Exception | None = None,
    ) -> None:
        body = {"code": code, "message": message, "details": details or []} if code is not None else None
        for _ in range(times):
            self.faults.append(Fault(status, body, dict(headers or {}), error))

    def bodies(self) -> list[Any]:
        return [json.loads(r.content) if r.content else None for r in self.requests]

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.faults:
            fault = self.faults.popleft()
            if fault.error is not None:
                raise fault.error
            return httpx.Response(fault.status, json=fault.body, headers=fault.headers)
        if request.headers.get("authorization") != f"Bearer {TOKEN}":
            return _status(401, 16, "missing or invalid token")
        path = request.url.path
        if not path.startswith(PREFIX):
            return _status(404, 5, "no such route")
        rest = path[len(PREFIX) :].lstrip("/")
        body: Any = json.loads(request.content) if request.content else None
        params = request.url.params
        match request.method, rest:
            case "POST", "":
                return self._create(body, params.get("requestId"))
            case "GET", "":
                return self._list(params)
            case "POST", action if action.endswith(":applyAvailableUpdate"):
                return self._apply(action.removesuffix(":applyAvailableUpdate"))
            case "GET", runner_id:
                return self._get(runner_id)
            case "PATCH", runner_id:
                return self._patch(runner_id, body, params.get("updateMask", ""))
            case "DELETE", runner_id:
                return self._delete(runner_id, params.get("allowMissing") == "true")
        return _status(501, 12, "not implemented")

    def _create(self, body: dict[str, Any], request_id: str | None) -> httpx.Response:
        if not request_id:
            return _status(400, 3, "missing idempotency token")
        runner_id = body["identity"]["runnerId"]
        if runner_id in self.runners:
            return _status(409, 6, "runner exists")
        stored = runner_json(runner_id) | body
        stored["identity"] = runner_json(runner_id)["identity"] | body["identity"]
        self.runners[runner_id] = stored
        return httpx.Response(200, json=stored)

    def _get(self, runner_id: str) -> httpx.Response:
        if runner_id not in self.runners:
            return _status(404, 5, f"runner {runner_id} not found")
        return httpx.Response(200, json=self.runners[runner_id])

    def _list(self, params: httpx.QueryParams) -> httpx.Response:
        ids = sorted(self.runners)
        start = int(params.get("pageToken", "0"))
        size = int(params.get("pageSize", self.page_size))
        page = [self.runners[i] for i in ids[start : start + size]]
        out: dict[str, Any] = {self.list_key: page}
        if start + size < len(ids):
            out["nextPageToken"] = str(start + size)
        return httpx.Response(200, json=out)

    def _patch(self, runner_id: str, body: dict[str, Any], mask: str) -> httpx.Response:
        if runner_id not in self.runners:
            return _status(404, 5, "not found")
        stored = self.runners[runner_id]
        paths = mask.split(",")
        if "policy" in paths and body.get("etag") != stored["etag"]:
            return _status(400, 9, "managed_runner.etag is stale; reload the runner and retry")
        for path in paths:
            head, _, tail = path.partition(".")
            source, target = body.get(head), stored
            if tail:
                source = (source or {}).get(tail)
                target = stored.setdefault(head, {})
                head = tail
            if source is None:
                target.pop(head, None)
            else:
                target[head] = source
        if "policy" in paths:
            stored["etag"] = stored["etag"] + "+"
        return httpx.Response(200, json=stored)

    def _delete(self, runner_id: str, allow_missing: bool) -> httpx.Response:
        if runner_id not in self.runners:
            return httpx.Response(200, json={}) if allow_missing else _status(404, 5, "not found")
        del self.runners[runner_id]
        return httpx.Response(200, json={})

    def _apply(self, runner_id: str) -> httpx.Response:
        stored = self.runners.get(runner_id)
        if stored is None:
            return _status(404, 5, "not found")
        if not stored.get("updateAvailable"):
            return _status(400, 9, "no update available")
        stored["updateAvailable"] = False
        stored["targetRevision"] = stored.get("targetRevision", 1) + 1
        stored["rolloutInProgress"] = True
        return httpx.Response(200, json=stored)


def _status(http: int, code: int, message: str) -> httpx.Response:
    return httpx.Response(http, json={"code": code, "message": message, "details": []})


class Body(httpx.AsyncByteStream):
    """A list response body sent in small chunks, optionally losing the connection after `cut` bytes."""

    def __init__(self, data: bytes, cut: int | None = None, size: int = 7) -> None:
        self.data, self.cut, self.size, self.closed = data, cut, size, False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        end = len(self.data) if self.cut is None else self.cut
        for at in range(0, end, self.size):
            yield self.data[at : min(at + self.size, end)]
        if self.cut is not None:
            raise httpx.ReadError(f"connection reset; Authorization: Bearer {TOKEN}")

    async def aclose(self) -> None:
        self.closed = True


def list_page(*runner_ids: str, token: str = "") -> bytes:
    """A list response naming these runners, with this next-page token."""
    return json.dumps(
        {"managedRunners": [runner_json(r) for r in runner_ids], "nextPageToken": token}
    ).encode()
