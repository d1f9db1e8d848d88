"""Every Event and condition reason the operator uses, with what it means and what to do.

Reasons are a stable interface (alerts and Argo CD health key on them). A test finds every reason
literal in the code and fails if it is missing here; docs/observability.md is generated from this.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

EVENT = "Event"
READY = "Ready"
SYNCED = "Synced"
STALLED = "Stalled"


class Reason(StrEnum):
    """Every reason the operator writes: a condition's or an Event's reason is one of these (typed)."""

    CREATED = "Created"
    ADOPTED = "Adopted"
    UPDATED = "Updated"
    DRIFT_CORRECTED = "DriftCorrected"
    UPDATE_APPLIED = "UpdateApplied"
    UPDATE_NOT_AVAILABLE = "UpdateNotAvailable"
    RECREATING_DELETED_RUNNER = "RecreatingDeletedRunner"
    DELETION_REQUESTED = "DeletionRequested"
    DELETED = "Deleted"
    ORPHANED = "Orphaned"
    READY = "Ready"
    CREATE_CONFIRMED = "CreateConfirmed"
    REPLACEMENT_STARTED = "ReplacementStarted"
    REPLACED = "Replaced"
    REPLACING = "Replacing"
    AVAILABLE = "Available"
    CREATING = "Creating"
    AWAITING_FINALIZER = "AwaitingFinalizer"
    ADOPTING = "Adopting"
    UPDATING = "Updating"
    INSTALLING = "Installing"
    ROLLING_OUT = "RollingOut"
    INSTALL_FAILED = "InstallFailed"
    DISCONNECTED = "Disconnected"
    UNKNOWN_STATUS = "UnknownStatus"
    DELETING_OUT_OF_BAND = "DeletingOutOfBand"
    DELETING = "Deleting"
    ABSENT = "Absent"
    PAUSED = "Paused"
    IN_SYNC = "InSync"
    SYNCED = "Synced"
    PROGRESSING = "Progressing"
    API_UNAVAILABLE = "ApiUnavailable"
    RATE_LIMITED = "RateLimited"
    STALE_ETAG = "StaleEtag"
    CREDENTIALS_REJECTED = "CredentialsRejected"
    PERMISSION_DENIED = "PermissionDenied"
    CREDENTIALS_MISSING = "CredentialsMissing"
    DEFAULT_CREDENTIALS_NOT_ALLOWED = "DefaultCredentialsNotAllowed"
    CREDENTIALS_SECRET_NOT_FOUND = "CredentialsSecretNotFound"
    CREDENTIALS_KEY_MISSING = "CredentialsKeyMissing"
    SECRET_NOT_FOUND = "SecretNotFound"
    SECRET_KEY_MISSING = "SecretKeyMissing"
    SECRET_ACCESS_DENIED = "SecretAccessDenied"
    SECRET_READ_FAILED = "SecretReadFailed"
    INTERNAL_ERROR = "InternalError"
    NOT_FOUND = "NotFound"
    FAILED_PRECONDITION = "FailedPrecondition"
    ALREADY_EXISTS = "AlreadyExists"
    INVALID_SPEC = "InvalidSpec"
    RUNNER_ID_TAKEN = "RunnerIdTaken"
    CLUSTER_TAKEN = "ClusterTaken"
    DUPLICATE_RUNNER_ID = "DuplicateRunnerId"
    IMMUTABLE_FIELD_CHANGED = "ImmutableFieldChanged"
    ADOPTION_MISMATCH = "AdoptionMismatch"
    INCOMPATIBLE_SERVER = "IncompatibleServer"
    UNIMPLEMENTED = "Unimplemented"
    ENDPOINT_MISROUTED = "EndpointMisrouted"
    RUNNER_NOT_VISIBLE = "RunnerNotVisible"
    OWNERSHIP_UNKNOWN = "OwnershipUnknown"
    REPLACEMENT_TARGET_TAKEN = "ReplacementTargetTaken"
    DELETION_STALLED = "DeletionStalled"
    API_ERROR = "ApiError"


REASONS: Final[dict[str, tuple[tuple[str, ...], str]]] = {
    # life cycle
    "Created": ((EVENT,), "The runner was created in CoreWeave."),
    "Adopted": ((EVENT,), "An existing runner was adopted (spec.adopt: true, identity matched)."),
    "Updated": ((EVENT,), "A spec change was sent; the message lists the update mask."),
    "DriftCorrected": ((EVENT,), "The runner was changed outside Kubernetes and restored to the spec."),
    "UpdateApplied": (
        (EVENT,),
        "The available runner update was applied (spec.updates: a new request, or WhenAvailable); the"
        " message gives the revisions; status.lastAppliedUpdate records it.",
    ),
    "UpdateNotAvailable": (
        (EVENT,),
        "A new spec.updates.request found no update to apply; it is answered (status.lastUpdateRequest)"
        " and not retried: set a new value once status.updateAvailable is true.",
    ),
    "RecreatingDeletedRunner": (
        (EVENT,),
        "The runner was deleted outside Kubernetes; it is being created again.",
    ),
    "DeletionRequested": ((EVENT,), "The runner's decommission was requested (deletionPolicy: Delete)."),
    "Deleted": ((EVENT, READY), "The runner is gone; the finalizer is released."),
    "Orphaned": (
        (EVENT, READY),
        "The resource was deleted and the runner left in place (deletionPolicy: Orphan).",
    ),
    "Ready": ((EVENT,), "The runner became installed, connected and rolled out."),
    "CreateConfirmed": (
        (EVENT,),
        "A create whose response was lost is confirmed as this resource's (the runner appeared after the "
        "create key was reserved); it is managed from here.",
    ),
    "ReplacementStarted": (
        (EVENT,),
        "spec.replacementPolicy: Replace and the identity changed: the old runner goes.",
    ),
    "Replaced": ((EVENT,), "The replacement runner was created."),
    "Replacing": ((READY,), "An opt-in replacement is under way; status.replacement shows the step."),
    "Available": (
        (READY,),
        "Ready: installed, connected, at the target revision, in sync with this generation.",
    ),
    "Creating": ((READY,), "The create is being prepared or sent."),
    "AwaitingFinalizer": (
        (READY,),
        "Nothing is created or adopted until the resource carries the operator's finalizer (a moment).",
    ),
    "Adopting": ((READY,), "Adopted; the spec is being applied."),
    "Updating": ((READY,), "Changes were just sent."),
    "Installing": ((READY,), "CoreWeave is installing the runner (PENDING or PROVISIONING)."),
    "RollingOut": ((READY,), "A new revision is rolling out (active revision below target)."),
    "InstallFailed": (
        (EVENT, READY),
        "CoreWeave reports an install failure; status.installError has the cause.",
    ),
    "Disconnected": ((EVENT, READY), "The runner is installed but not connected to CoreWeave."),
    "UnknownStatus": ((READY,), "CoreWeave reports an install status this operator does not know."),
    "DeletingOutOfBand": (
        (READY,),
        "Someone is deleting the runner outside Kubernetes; it will be recreated.",
    ),
    "Deleting": ((READY,), "The runner is being decommissioned."),
    "Absent": ((READY,), "The runner does not exist."),
    "Paused": ((READY, SYNCED), "spec.paused is true: the operator observes but sends no change."),
    "InSync": ((READY,), "Nothing to send (used while the runner is not yet ready)."),
    # last pass
    "Synced": ((SYNCED,), "The last pass applied the spec."),
    "Progressing": ((STALLED,), "Not stalled."),
    # retried (transient)
    "ApiUnavailable": (
        (EVENT, SYNCED),
        "The CoreWeave API failed or timed out after retries; retried with backoff.",
    ),
    "RateLimited": ((EVENT, SYNCED), "The CoreWeave API returned 429; every runner on this token waits."),
    "StaleEtag": ((EVENT, SYNCED), "The policy changed concurrently; re-planned from a fresh read."),
    "CredentialsRejected": (
        (EVENT, READY, SYNCED, STALLED),
        "The API rejected the token (401): fix the credentials Secret.",
    ),
    "PermissionDenied": (
        (EVENT, READY, SYNCED, STALLED),
        "The token lacks SANDBOX_ADMIN (403).",
    ),
    "CredentialsMissing": (
        (EVENT, READY, SYNCED, STALLED),
        "No credentials Secret on the resource and no operator default.",
    ),
    "DefaultCredentialsNotAllowed": (
        (EVENT, READY, SYNCED, STALLED),
        "The resource names no Secret and its namespace may not use the operator's default credentials.",
    ),
    "CredentialsSecretNotFound": (
        (EVENT, READY, SYNCED, STALLED),
        "The credentials Secret does not exist in the namespace.",
    ),
    "CredentialsKeyMissing": (
        (EVENT, READY, SYNCED, STALLED),
        "The credentials Secret lacks the key (default `token`).",
    ),
    "SecretNotFound": (
        (EVENT, READY, SYNCED, STALLED),
        "A Secret referenced by overrides.env does not exist.",
    ),
    "SecretKeyMissing": (
        (EVENT, READY, SYNCED, STALLED),
        "A Secret referenced by overrides.env lacks the key.",
    ),
    "SecretAccessDenied": (
        (EVENT, READY, SYNCED, STALLED),
        "The operator may not read a referenced Secret (RBAC).",
    ),
    "SecretReadFailed": (
        (EVENT, READY, SYNCED, STALLED),
        "Reading a referenced Secret failed.",
    ),
    "InternalError": ((EVENT, SYNCED), "An unexpected error in the operator; retried."),
    "NotFound": ((EVENT, SYNCED), "The API answered NOT_FOUND where the runner was expected."),
    "FailedPrecondition": ((EVENT, SYNCED), "The API refused the call in the runner's current state."),
    "AlreadyExists": ((EVENT, SYNCED), "The API answered ALREADY_EXISTS outside a create."),
    # needs a spec change or a person (terminal: Stalled=True)
    "InvalidSpec": (
        (EVENT, READY, SYNCED, STALLED),
        "The API rejected the spec; the message has the field violations.",
    ),
    "RunnerIdTaken": (
        (EVENT, READY, SYNCED, STALLED),
        "The runner ID exists and was not created here: set spec.adopt: true or change runnerId.",
    ),
    "ClusterTaken": (
        (EVENT, READY, SYNCED, STALLED),
        "The cluster already has a runner (named in the message).",
    ),
    "DuplicateRunnerId": (
        (EVENT, READY, SYNCED, STALLED),
        "Another ManagedRunner already manages this runner ID.",
    ),
    "ImmutableFieldChanged": (
        (EVENT, READY, SYNCED, STALLED),
        "zone or clusterId differ from the runner's: create a new ManagedRunner.",
    ),
    "AdoptionMismatch": (
        (EVENT, READY, SYNCED, STALLED),
        "adopt: the runner's zone or cluster differ from the spec.",
    ),
    "IncompatibleServer": (
        (EVENT, READY, SYNCED, STALLED),
        "The API response lacks required fields (e.g. spec).",
    ),
    "Unimplemented": ((EVENT, READY, SYNCED, STALLED), "The API does not implement the call (501)."),
    "ApiError": (
        (EVENT, READY, SYNCED, STALLED),
        "The API answered with an error code this operator does not know.",
    ),
    "EndpointMisrouted": (
        (EVENT, READY, SYNCED, STALLED),
        "The endpoint answered 404 without the API's NOT_FOUND status (proxy, base path, ingress): nothing "
        "is created, forgotten or released on it; fix RUNNER_OPERATOR_API_ENDPOINT or the route.",
    ),
    "RunnerNotVisible": (
        (EVENT, READY, SYNCED, STALLED),
        "NOT_FOUND read with credentials other than those that last saw the runner (another organization?): "
        "no create, no release. Restore the credentials, or delete with deletionPolicy: Orphan.",
    ),
    "OwnershipUnknown": (
        (EVENT, READY, SYNCED, STALLED),
        "A create replay was refused and nothing proves whether the runner is this resource's: nothing is "
        "deleted, adopted or released (set spec.adopt: true, or deletionPolicy: Orphan).",
    ),
    "ReplacementTargetTaken": (
        (EVENT, READY, SYNCED, STALLED),
        "Replace: the new runner ID already exists in the cloud; the old runner is kept (adopt it or choose "
        "another runnerId).",
    ),
    "DeletionStalled": (
        (EVENT, STALLED),
        "Deletion passed its deadline; still retrying. Check the console or set deletionPolicy: Orphan.",
    ),
}
