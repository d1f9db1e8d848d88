"""HTTP probes of the operator's endpoints, shared by the unit and e2e tiers."""

from __future__ import annotations

import urllib.error
import urllib.request


def http_status(url: str, timeout: float = 2) -> int | None:
    """The HTTP status `url` answers with, or None when nothing answers.

    An error answer's connection is closed here: left to the garbage collector, its socket warns,
    and with warnings as errors that fails whichever later test happens to collect it.
    """
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        exc.close()
        return exc.code
    except OSError:
        return None
