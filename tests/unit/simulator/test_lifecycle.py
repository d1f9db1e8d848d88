"""The asynchronous life cycle of contract 5.4, driven by a manual clock (no sleeping)."""

from __future__ import annotations

import pytest

from runner_operator.simulator.core import Simulator
from runner_operator.simulator.errors import ApiError
from tests.clock import FakeClock
from tests.unit.simulator.conftest import runner


def test_create_starts_pending_with_target_revision_one(sim: Simulator) -> None:
    created = sim.create(runner(), "req-1")
    assert created["installStatus"] == "RUNNER_INSTALL_STATUS_PENDING"
    assert "connectionStatus" not in created
    assert "activeRevision" not in created
    assert created["targetRevision"] == 1
    assert created["rolloutInProgress"] is True
    assert "lastHeartbeatTime" not in created
    assert created["createTime"] == created["updateTime"] == "2027-01-15T08:00:00Z"


@pytest.mark.parametrize(
    ("elapsed", "install", "connection"),
    [
        pytest.param(1.9, "PENDING", None, id="still-pending-before-install-seconds"),
        pytest.param(2.0, "PROVISIONING", None, id="provisioning-after-install-seconds"),
        pytest.param(6.9, "PROVISIONING", None, id="provisioning-until-provision-seconds-pass"),
        pytest.param(7.0, "READY", "CONNECTED", id="ready-and-connected-after-both"),
    ],
)
def test_install_progresses_with_time(
    sim: Simulator, clock: FakeClock, elapsed: float, install: str, connection: str | None
) -> None:
    sim.create(runner(), "req-1")
    clock.tick(elapsed)
    got = sim.get("prod-east")
    assert got["installStatus"] == f"RUNNER_INSTALL_STATUS_{install}"
    assert got.get("connectionStatus") == (connection and f"RUNNER_CONNECTION_STATUS_{connection}")


def test_ready_runner_has_caught_up_and_runs_the_channel_version(sim: Simulator, clock: FakeClock) -> None:
    sim.create(runner(), "req-1")
    clock.tick(7)
    got = sim.get("prod-east")
    assert (got["activeRevision"], got["targetRevision"]) == (1, 1)
    assert "rolloutInProgress" not in got
    assert got["activeConfigVersion"] == "stable-1.0.0"
    assert got["lastHeartbeatTime"] == "2027-01-15T08:00:07Z"


def test_heartbeat_advances_only_while_connected(sim: Simulator, clock: FakeClock) -> None:
    sim.create(runner(), "req-1")
    clock.tick(7 + 25)
    assert sim.get("prod-east")["lastHeartbeatTime"] == "2027-01-15T08:00:27Z"
    disconnected = sim.disconnect("prod-east")
    assert disconnected["connectionStatus"] == "RUNNER_CONNECTION_STATUS_DISCONNECTED"
    clock.tick(60)
    assert sim.get("prod-east")["lastHeartbeatTime"] == "2027-01-15T08:00:27Z"
    sim.reconnect("prod-east")
    clock.tick(10)
    got = sim.get("prod-east")
    assert got["connectionStatus"] == "RUNNER_CONNECTION_STATUS_CONNECTED"
    assert got["lastHeartbeatTime"] == "2027-01-15T08:01:42Z"


def test_default_policy_is_stored_on_connect_when_absent(sim: Simulator, clock: FakeClock) -> None:
    body = runner()
    del body["policy"]
    created = sim.create(body, "req-1")
    assert "policy" not in created
    clock.tick(7)
    got = sim.get("prod-east")
    assert got["policy"] == {"displayName": "Default policy"}
    assert got["etag"] != created["etag"]


def test_explicit_empty_policy_is_kept_on_connect(sim: Simulator, clock: FakeClock) -> None:
    created = sim.create(runner(), "req-1")
    clock.tick(7)
    got = sim.get("prod-east")
    assert got["policy"] == {}
    assert got["etag"] == created["etag"]


def test_spec_update_rolls_out_a_new_revision(sim: Simulator, clock: FakeClock) -> None:
    sim.create(runner(), "req-1")
    clock.tick(7)
    before = sim.get("prod-east")
    updated = sim.update("prod-east", {"spec": {"enforceResourceLimits": True}}, "spec.enforceResourceLimits")
    assert (updated["activeRevision"], updated["targetRevision"], updated["rolloutInProgress"]) == (
        1,
        2,
        True,
    )
    assert updated["etag"] == before["etag"]
    clock.tick(2.9)
    assert sim.get("prod-east")["rolloutInProgress"] is True
    clock.tick(0.1)
    done = sim.get("prod-east")
    assert (done["activeRevision"], done["targetRevision"]) == (2, 2)
    assert "rolloutInProgress" not in done


def test_spec_update_during_install_is_picked_up_by_the_install(sim: Simulator, clock: FakeClock) -> None:
    sim.create(runner(), "req-1")
    sim.update("prod-east", {"spec": {"enforceResourceLimits": True}}, "spec.enforceResourceLimits")
    clock.tick(7)
    got = sim.get("prod-east")
    assert (got["activeRevision"], got["targetRevision"]) == (2, 2)


def test_unchanged_spec_write_does_not_bump_the_revision(sim: Simulator, clock: FakeClock) -> None:
    sim.create(runner(spec={"enforceResourceLimits": True}), "req-1")
    clock.tick(7)
    got = sim.update("prod-east", {"spec": {"enforceResourceLimits": True}}, "spec.enforceResourceLimits")
    assert got["targetRevision"] == 1
    assert got["updateTime"] == got["createTime"]


def test_policy_update_rotates_etag_but_not_revision(sim: Simulator, clock: FakeClock) -> None:
    created = sim.create(runner(), "req-1")
    clock.tick(7)
    got = sim.update("prod-east", {"policy": {"displayName": "x"}, "etag": created["etag"]}, "policy")
    assert got["etag"] != created["etag"]
    assert got["targetRevision"] == 1
    assert got["updateTime"] == "2027-01-15T08:00:07Z"


def test_display_name_update_keeps_etag_and_revision(sim: Simulator, clock: FakeClock) -> None:
    created = sim.create(runner(), "req-1")
    clock.tick(1)
    got = sim.update("prod-east", {"displayName": "East"}, "displayName")
    assert (got["etag"], got["targetRevision"], got["displayName"]) == (created["etag"], 1, "East")
    assert got["updateTime"] == "2027-01-15T08:00:01Z"


def test_delete_keeps_runner_readable_then_releases_id_and_cluster(sim: Simulator, clock: FakeClock) -> None:
    sim.create(runner(), "req-1")
    clock.tick(7)
    assert sim.delete("prod-east") == {}
    got = sim.get("prod-east")
    assert got["installStatus"] == "RUNNER_INSTALL_STATUS_DELETING"
    assert got["connectionStatus"] == "RUNNER_CONNECTION_STATUS_CONNECTED"
    with pytest.raises(ApiError) as same_cluster:
        sim.create(runner("other"), "req-2")
    assert same_cluster.value.code == 6
    clock.tick(4.9)
    assert sim.delete("prod-east") == {}  # repeating is harmless and does not restart the timer
    clock.tick(0.1)
    with pytest.raises(ApiError) as gone:
        sim.get("prod-east")
    assert gone.value.code == 5
    assert sim.create(runner("other"), "req-2")["identity"]["runnerId"] == "other"


def test_deleting_runner_refuses_updates(sim: Simulator) -> None:
    sim.create(runner(), "req-1")
    sim.delete("prod-east")
    with pytest.raises(ApiError) as refused:
        sim.update("prod-east", {"displayName": "x"}, "displayName")
    assert refused.value.code == 9


def test_install_failure_reports_error_and_recovers(sim: Simulator, clock: FakeClock) -> None:
    sim.create(runner(), "req-1")
    failed = sim.fail_install("prod-east", message="no nodes")
    assert failed["installStatus"] == "RUNNER_INSTALL_STATUS_FAILED"
    assert failed["installError"]["message"] == "no nodes"
    assert failed["installError"]["occurredAt"] == "2027-01-15T08:00:00Z"
    clock.tick(60)
    assert sim.get("prod-east")["installStatus"] == "RUNNER_INSTALL_STATUS_FAILED"
    recovering = sim.recover_install("prod-east")
    assert recovering["installStatus"] == "RUNNER_INSTALL_STATUS_PROVISIONING"
    assert "installError" not in recovering
    clock.tick(5)
    assert sim.get("prod-east")["installStatus"] == "RUNNER_INSTALL_STATUS_READY"


def test_armed_install_failure_strikes_when_install_would_finish(sim: Simulator, clock: FakeClock) -> None:
    sim.create(runner(), "req-1")
    sim.fail_install("prod-east", immediately=False)
    clock.tick(6.9)
    assert sim.get("prod-east")["installStatus"] == "RUNNER_INSTALL_STATUS_PROVISIONING"
    clock.tick(0.1)
    assert sim.get("prod-east")["installStatus"] == "RUNNER_INSTALL_STATUS_FAILED"


def test_release_makes_update_available_and_apply_rolls_it_out(sim: Simulator, clock: FakeClock) -> None:
    sim.create(runner(), "req-1")
    clock.tick(7)
    with pytest.raises(ApiError) as nothing:
        sim.apply_available_update("prod-east")
    assert nothing.value.code == 9
    assert sim.publish_release() == "stable-1.0.1"
    assert sim.get("prod-east")["updateAvailable"] is True
    applying = sim.apply_available_update("prod-east")
    assert (applying["targetRevision"], applying["rolloutInProgress"]) == (2, True)
    assert applying["activeConfigVersion"] == "stable-1.0.0"
    assert "updateAvailable" not in applying
    clock.tick(3)
    done = sim.get("prod-east")
    assert done["activeConfigVersion"] == "stable-1.0.1"
    assert done["activeRevision"] == 2


def test_release_on_other_channel_does_not_concern_the_runner(sim: Simulator, clock: FakeClock) -> None:
    sim.create(runner(), "req-1")
    clock.tick(7)
    sim.publish_release("RELEASE_CHANNEL_RAPID", "rapid-9")
    assert "updateAvailable" not in sim.get("prod-east")


def test_advance_clock_travels_in_time(sim: Simulator) -> None:
    sim.create(runner(), "req-1")
    sim.advance_clock(7)
    assert sim.get("prod-east")["installStatus"] == "RUNNER_INSTALL_STATUS_READY"


def test_out_of_band_create_is_installed_immediately(sim: Simulator) -> None:
    got = sim.create_out_of_band(runner())
    assert got["installStatus"] == "RUNNER_INSTALL_STATUS_READY"
    assert got["connectionStatus"] == "RUNNER_CONNECTION_STATUS_CONNECTED"
    assert (got["activeRevision"], got["targetRevision"]) == (1, 1)


def test_out_of_band_edits_change_state_without_etag(sim: Simulator, clock: FakeClock) -> None:
    created = sim.create(runner(spec={"enforceResourceLimits": True}), "req-1")
    clock.tick(7)
    got = sim.edit_out_of_band(
        "prod-east",
        {
            "displayName": "hijacked",
            "identity": {"runnerGroupId": "blue"},
            "policy": {"displayName": "p"},
            "spec": {},
        },
    )
    assert got["displayName"] == "hijacked"
    assert got["identity"]["runnerGroupId"] == "blue"
    assert got["policy"] == {"displayName": "p"}
    assert got["etag"] != created["etag"]
    assert got["spec"] == {"releaseChannel": "RELEASE_CHANNEL_STABLE"}
    assert got["targetRevision"] == 2


def test_out_of_band_edit_refuses_immutable_fields(sim: Simulator) -> None:
    sim.create(runner(), "req-1")
    with pytest.raises(ValueError, match=r"identity\.zone"):
        sim.edit_out_of_band("prod-east", {"identity": {"zone": "elsewhere"}})


def test_out_of_band_delete_is_immediate(sim: Simulator) -> None:
    sim.create(runner(), "req-1")
    sim.delete_out_of_band("prod-east")
    assert sim.list_runners() == {"managedRunners": []}


def test_reset_forgets_everything(sim: Simulator) -> None:
    sim.create(runner(), "req-1")
    sim.fail_next("get")
    sim.reset()
    assert len(sim) == 0
    assert sim.faults.describe()["scripted"] == {}
    assert sim.create(runner(), "req-1")["installStatus"] == "RUNNER_INSTALL_STATUS_PENDING"
