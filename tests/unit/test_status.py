"""Status patches: camelCase names, set fields only, an explicit None deletes (JSON merge patch)."""

from __future__ import annotations

import pydantic
import pytest

from runner_operator import conditions, reporting
from runner_operator.cloud.models import CloudRunner, parse_runner
from runner_operator.reasons import Reason
from runner_operator.status import Condition, PlanPreview, Replacement, StatusPatch

STAMP = "2026-12-02T12:00:00Z"


def test_only_set_fields_are_written_by_their_crd_names() -> None:
    patch = StatusPatch(runner_id="prod-1", observed_generation=3, create_requested_time=STAMP)
    assert patch.to_patch() == {"runnerId": "prod-1", "observedGeneration": 3, "createRequestedTime": STAMP}
    assert StatusPatch().to_patch() == {}


def test_an_explicit_none_deletes_the_key() -> None:
    patch = StatusPatch(runner_id=None, create_request_id=None, plan=None, replacement=None)
    assert patch.to_patch() == {"runnerId": None, "createRequestId": None, "plan": None, "replacement": None}


def test_the_right_patch_wins_and_its_unset_fields_change_nothing() -> None:
    base = StatusPatch(runner_id="prod-1", phase="Creating", recreations=1)
    merged = base | StatusPatch(runner_id=None, recreations=2)
    assert merged.to_patch() == {"runnerId": None, "phase": "Creating", "recreations": 2}
    assert base.to_patch() == {"runnerId": "prod-1", "phase": "Creating", "recreations": 1}, "unchanged"
    assert (base | StatusPatch()).to_patch() == base.to_patch()


def test_nested_objects_write_only_their_set_fields() -> None:
    started = Replacement(from_runner_id="old")
    creating = started | Replacement(phase="Creating")
    assert StatusPatch(replacement=creating).to_patch() == {
        "replacement": {"fromRunnerId": "old", "phase": "Creating"}
    }


def test_a_stored_object_is_written_back_as_it_was() -> None:
    stored = {"fromRunnerId": "old", "startedTime": STAMP, "phase": "DeletingOld"}
    replacement = Replacement.model_validate(stored) | Replacement(phase="Creating")
    assert replacement.to_patch() == {**stored, "phase": "Creating"}


def test_lists_are_written_as_json_lists() -> None:
    # Compared with the stored (JSON) status to skip unchanged writes: a tuple never equals a list.
    patch = StatusPatch(plan=PlanPreview(action="update", update_mask=("a", "b"))).to_patch()
    assert patch == {"plan": {"action": "update", "updateMask": ["a", "b"]}}
    assert type(patch["plan"]["updateMask"]) is list


def test_a_patch_round_trips_through_its_crd_names() -> None:
    patch = StatusPatch(
        runner_id=None,
        conditions=(Condition(type="Ready", status="False", reason="Absent", last_transition_time=STAMP),),
        data_plane_status={"state": "READY"},
    ).to_patch()
    assert StatusPatch.model_validate(patch).to_patch() == patch


def test_a_misspelled_field_is_refused() -> None:
    # mypy reports it first (pydantic plugin); at run time it is an error, never a pruned key.
    with pytest.raises(pydantic.ValidationError, match="runnerID"):
        StatusPatch.model_validate({"runnerID": "prod-1"})
    with pytest.raises(pydantic.ValidationError, match="deadline"):
        StatusPatch.model_validate(
            {"deletion": {"requestedTime": STAMP, "deadline": STAMP, "stalled": False}}
        )


def test_patches_are_immutable() -> None:
    patch = StatusPatch(phase="Ready")
    with pytest.raises(pydantic.ValidationError):
        patch.phase = "Failed"  # type: ignore[misc]


def test_is_set_tells_a_deletion_from_an_untouched_field() -> None:
    patch = StatusPatch(runner_id=None)
    assert patch.is_set("runner_id")
    assert not patch.is_set("credentials_secret")
    with pytest.raises(AttributeError, match="runnerId"):
        patch.is_set("runnerId")


def test_cloud_fields_the_runner_lacks_are_written_as_null() -> None:
    runner = parse_runner(
        {"identity": {"runnerId": "prod-1"}, "installStatus": "RUNNER_INSTALL_STATUS_PENDING"}
    )
    patch = reporting.observed_status(runner).to_patch()
    assert patch["installStatus"] == "RUNNER_INSTALL_STATUS_PENDING"
    assert patch["installError"] is None
    assert patch["etag"] is None
    assert "runnerId" not in patch, "ownership is written on create or adoption only"


def test_an_install_error_is_mirrored_field_for_field() -> None:
    runner = CloudRunner.model_validate(
        {"installError": {"reason": "IMAGE_PULL", "remediationHints": ["check the image"], "unknown": 1}}
    )
    patch = reporting.observed_status(runner).to_patch()
    assert patch["installError"] == {"reason": "IMAGE_PULL", "remediationHints": ["check the image"]}


def test_merged_conditions_keep_stored_ones_verbatim_and_stamp_flips() -> None:
    stored = [
        {"type": "Ready", "status": "False", "reason": "Creating", "lastTransitionTime": STAMP},
        {"type": "Custom", "status": "True", "reason": "Other", "lastTransitionTime": STAMP},
    ]
    later = "2026-12-02T12:05:00Z"
    merged = conditions.merge(
        stored,
        [conditions.Condition(conditions.READY, "True", Reason.AVAILABLE, "up")],
        generation=4,
        now=later,
    )
    assert StatusPatch(conditions=merged).to_patch()["conditions"] == [
        {
            "type": "Ready",
            "status": "True",
            "reason": "Available",
            "message": "up",
            "lastTransitionTime": later,
            "observedGeneration": 4,
        },
        stored[1],
    ]
