"""Kubernetes API calls as plain JSON, on the official client's configuration, auth and connections.

The client's typed API classes stay in memory for the life of the process: importing `CoreV1Api`
builds about 240 pydantic models, 19 MB of RSS, for the three calls the operator makes on core
objects (read a Secret, patch its finalizers, read a Namespace's labels; bench/RESULTS.md, "The
official client's CoreV1Api"). Failures are the client's own `ApiException`, so callers keep
reading `exc.status`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kubernetes import client


class KubeApi:
    """One connection pool; each call sends `body` as JSON and returns the response's JSON object."""

    def __init__(self, api: client.ApiClient | None = None) -> None:
        self.api = api if api is not None else client.ApiClient()

    def get(self, path: str, params: Mapping[str, str]) -> dict[str, Any]:
        return self.call("GET", path, params)

    def patch(self, path: str, params: Mapping[str, str], body: object, content_type: str) -> dict[str, Any]:
        return self.call("PATCH", path, params, body=body, content_type=content_type)

    def call(
        self,
        method: str,
        path: str,
        params: Mapping[str, str],
        *,
        body: object = None,
        content_type: str | None = None,
    ) -> dict[str, Any]:
        """`path` names its parameters as `{name}`; each value is quoted into it."""
        headers = {"Accept": "application/json"}
        if content_type is not None:
            headers["Content-Type"] = content_type
        request = self.api.param_serialize(
            method,
            path,
            path_params=dict(params),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self.api.call_api(*request)
        data = response.read() or b""  # type: ignore[no-untyped-call]
        if not 200 <= response.status <= 299:
            raise client.ApiException.from_response(
                http_resp=response, body=data.decode("utf-8", "replace"), data=None
            )
        found = json.loads(data) if data else {}
        if not isinstance(found, dict):
            raise client.ApiException(status=response.status, reason="the response is not a JSON object")
        return found
