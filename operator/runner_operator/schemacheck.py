"""The CRD's verdict on manifests without a cluster, in the API server's own words.

The CRD refuses bad input with its structural schema and about a hundred CEL rules that use
Kubernetes' own CEL libraries (quantities, CIDRs, URLs). Only the API server's code gives the same
answers and messages, so `plan` runs it: `managed-runner-validate` (cmd/managed-runner-validate, a
small Go program over k8s.io/apiextensions-apiserver) checks each manifest against the CRD this
package carries, as a create with fieldValidation=Strict would. It is found through
RUNNER_OPERATOR_VALIDATOR or on PATH. The operator's image leaves it out: the operator never plans
offline, and the program would add about 50 MB to every pod.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

EXECUTABLE = "managed-runner-validate"
VARIABLE = "RUNNER_OPERATOR_VALIDATOR"
CRD_FILE = "managedrunners.sandbox.coreweave.com.yaml"
TIMEOUT_SECONDS = 60.0


class ValidatorFailed(Exception):
    """The validator could not give a verdict (not a verdict against a manifest)."""


def executable() -> str | None:
    """The validator to run: RUNNER_OPERATOR_VALIDATOR, else managed-runner-validate on PATH."""
    configured = os.environ.get(VARIABLE, "").strip()
    if configured:
        found = shutil.which(configured)
        if found is None:
            raise ValidatorFailed(f"{VARIABLE}={configured} is not an executable file")
        return found
    return shutil.which(EXECUTABLE)


def refusals(
    documents: Sequence[Mapping[str, Any]],
    program: str,
    previous: Sequence[Mapping[str, Any] | None] = (),
) -> list[str | None]:
    """For each document, the API server's refusal of storing it, or None when it would be stored.

    With `previous[i]`, document i is checked as an update of that version (transition rules such as
    the immutable identity fields apply), else as a create.
    """
    if not documents:
        return []
    olds = list(previous) or [None] * len(documents)
    if len(olds) != len(documents):
        raise ValueError("previous must give one entry (or None) per document")
    requests = [
        {"object": dict(doc), "old": dict(old) if old else None}
        for doc, old in zip(documents, olds, strict=True)
    ]
    with resources.as_file(resources.files("runner_operator") / "data" / CRD_FILE) as crd:
        try:
            done = subprocess.run(
                [program, "--crd", str(crd)],
                input=json.dumps(requests),
                capture_output=True,
                text=True,
                timeout=TIMEOUT_SECONDS,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ValidatorFailed(f"cannot run {program}: {exc}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise ValidatorFailed(f"{program} failed (exit {done.returncode}): {last}")
    try:
        answers = json.loads(done.stdout)
        verdicts = [answer["error"] for answer in answers]
    except (ValueError, TypeError, KeyError) as exc:
        raise ValidatorFailed(f"{program} gave an answer this version cannot read: {exc}") from None
    if len(verdicts) != len(documents) or not all(v is None or isinstance(v, str) for v in verdicts):
        raise ValidatorFailed(f"{program} gave {len(verdicts)} verdicts for {len(documents)} manifests")
    return verdicts
