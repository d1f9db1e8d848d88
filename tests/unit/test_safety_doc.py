"""docs/safety.md: the ownership rules in plain words, each with the tests that prove it.

The page is generated here (UPDATE_DOCS=1 rewrites it) and every test it cites must exist, so a rule
cannot outlive its proof.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "safety.md"
SOAK = ROOT / "bench" / "SOAK.md"
"""The last long soak's report (`python -m bench.soak --minutes 20 --out bench/SOAK.md`)."""
OWN = "tests/unit/core/test_ownership_rules.py"
E2E = "tests/e2e/test_ownership.py"
SHELL = "tests/unit/core/test_ownership_shell.py"

# (rule, plain words, [file::test or file::test[param id]])
RULES: list[tuple[str, str, list[str]]] = [
    (
        "Absence is evidence only when the API itself says so",
        "A runner is taken as gone only on the API's own NOT_FOUND: a google.rpc.Status body with code 5 "
        "for that runner. A 404 without that body (a proxy, a wrong base path, an ingress without a "
        "route), a NOT_FOUND that names another resource, a 401 or a 403 is an endpoint or credentials "
        "problem: it is reported (Synced=False, Stalled=True, reason EndpointMisrouted or the credentials "
        "reason) and never leads to a create, a forgotten binding or a released finalizer. A runner "
        "missing from the shared list counts only where the API itself arbitrates what follows: "
        "reserving a create key for that runner ID, on a list at most 30 seconds old, and sending the "
        "create, on the last list however old (a runner that exists "
        "refuses it with ALREADY_EXISTS and is then read directly; refused on the key's first send it is "
        "someone else's, see rule 6). Releasing, forgetting or "
        "recreating a runner, and sending a key reserved for another runner ID, always follow a "
        "direct read of that runner.",
        [
            "tests/unit/core/test_creation_reads.py::test_which_absence_needs_the_apis_own_not_found",
            "tests/unit/core/test_creation_reads.py::test_how_old_a_lists_absence_may_be",
            "tests/unit/core/test_creation_reads.py::test_a_creation_waits_for_a_list_only_when_its_reservation_would_rest_on_an_old_one",
            "tests/unit/core/test_creation_reads.py::test_a_runner_the_list_missed_before_the_reservation_is_never_taken_for_ours",
            "tests/unit/core/test_creation_reads.py::test_a_runner_the_list_missed_after_the_reservation_is_read_before_deciding",
            "tests/unit/core/test_creation_reads.py::test_a_replacement_target_the_list_missed_keeps_the_old_runner",
            "tests/unit/core/test_creation_reads.py::test_a_bound_runner_missing_from_the_list_is_read_directly",
            "tests/unit/core/test_creation_reads.py::test_a_deleting_resource_missing_from_the_list_is_read_directly",
            "tests/unit/cloud/test_errors.py::test_classification[empty-404-is-not-absence]",
            "tests/unit/cloud/test_errors.py::test_classification[proxy-404-is-not-absence]",
            "tests/unit/cloud/test_errors.py::test_not_found_is_about_the_runner_it_names",
            f"{SHELL}::test_bare_404_while_bound_or_deleting_is_reported_never_acted_on",
            f"{E2E}::test_bare_404s_never_recreate_nor_release",
        ],
    ),
    (
        "Only the credential that last saw a runner can prove it gone",
        "status.credentialFingerprint records which credential (a salted hash, never the token) last saw "
        "the runner or reserved its create. A NOT_FOUND read with any other credential, such as a token "
        "of another organization, proves nothing: no recreate, no release, reason RunnerNotVisible. "
        "Switching back to the credential that saw it resumes normal work. Runner IDs are unique per "
        "organization only, so a runner found under the same ID with a new credential but created at "
        "another time is not this resource's either: it is never updated, deleted or mirrored. An "
        "out-of-band deletion seen with the same credential is still recreated.",
        [
            f"{OWN}::test_rule[absent-with-another-credential-is-not-recreated]",
            f"{OWN}::test_rule[absent-with-another-credential-does-not-replay-a-reserved-create]",
            f"{OWN}::test_rule[deleting-absent-with-another-credential-keeps-the-finalizer]",
            f"{OWN}::test_rule[deleting-absent-with-the-same-credential-releases]",
            f"{OWN}::test_rule[replaced-runner-absent-with-another-credential-is-not-forgotten]",
            f"{SHELL}::test_not_found_with_another_credential_is_not_acted_on",
            f"{SHELL}::test_out_of_band_deletion_seen_with_the_same_credential_is_recreated",
            f"{OWN}::test_rule[another-organizations-runner-with-our-id-is-not-ours]",
            f"{OWN}::test_rule[another-organizations-runner-with-our-id-is-never-deleted]",
            f"{E2E}::test_token_of_another_organization_neither_recreates_nor_releases",
        ],
    ),
    (
        "Nothing destroys or forgets a runner without that evidence",
        "For every combination of facts the planner can see, an action that deletes a runner outside a "
        "deletion is an opted-in, unpaused, unblocked replacement, and an action that forgets a runner "
        "(release, recreate, forget the replaced one) follows the API's NOT_FOUND read with the same "
        "credential, or proof that the runner was never this resource's.",
        [f"{OWN}::test_nothing_destroys_or_forgets_a_runner_without_evidence"],
    ),
    (
        "Deletion needs only what deletion keeps",
        "deletionPolicy: Orphan releases the finalizer from the resource alone, without credentials or "
        "any call. Delete needs only the token, never env Secrets. While a ManagedRunner uses a credentials "
        "Secret, the Secret carries the finalizer sandbox.coreweave.com/credentials-in-use, so deleting the "
        "namespace or the Argo CD application cannot take the token away first; the finalizer goes when "
        "no ManagedRunner needs the Secret any more. A Secret the spec switched away from keeps it until the "
        "new credentials have seen the runner. No runner is created with a token whose Secret cannot take "
        "that finalizer (gone, or already being deleted, while a shared read still holds its token): the "
        "pass sends nothing and reports CredentialsSecretNotFound.",
        [
            f"{OWN}::test_rule[orphan-releases-without-any-evidence]",
            "tests/unit/core/test_ownership_shell.py::test_identity_is_enough_to_delete_an_unreadable_spec",
            f"{E2E}::test_secret_deleted_before_the_resource[Orphan]",
            f"{E2E}::test_secret_deleted_before_the_resource[Delete]",
            f"{E2E}::test_namespace_deletion_decommissions_every_runner",
            "tests/unit/core/test_secret_protection.py::"
            "test_switching_secrets_keeps_the_old_one_until_the_new_one_saw_the_runner",
            "tests/unit/core/test_secret_protection.py::"
            "test_release_drops_the_finalizer_only_when_no_other_resource_uses_the_secret",
            "tests/unit/core/test_secret_protection.py::test_never_sent_needs_no_credentials_to_delete",
            "tests/unit/core/test_secret_protection.py::"
            "test_nothing_is_created_with_a_secret_that_cannot_be_protected",
        ],
    ),
    (
        "Replacement is break-before-make, and breaks only what can be rebuilt",
        "The runner ID is the API's key and a cluster holds one runner, so a replacement cannot be made "
        "beside the old runner (make-before-break is impossible). Before the old runner is deleted the "
        "operator proves what it can: the resource is not paused, the new ID is claimed by no other "
        "ManagedRunner, it does not exist in the cloud (unless spec.adopt takes it over), and the new "
        "cluster holds no other runner. Otherwise the old runner is kept and the condition says why.",
        [
            f"{OWN}::test_rule[paused-replacement-sends-nothing]",
            f"{OWN}::test_rule[paused-cluster-replacement-sends-nothing]",
            f"{OWN}::test_rule[replacement-onto-an-id-taken-in-the-cloud-keeps-the-old-runner]",
            f"{OWN}::test_rule[replacement-onto-an-id-claimed-by-another-resource-keeps-the-old-runner]",
            f"{OWN}::test_rule[replacement-onto-a-taken-cluster-keeps-the-old-runner]",
            f"{OWN}::test_rule[cluster-replacement-onto-a-taken-cluster-keeps-the-runner]",
            f"{E2E}::test_paused_identity_change_with_replace_makes_no_call",
            f"{E2E}::test_replacement_onto_a_taken_or_claimed_id_keeps_the_old_runner",
        ],
    ),
    (
        "A lost create is found whatever the server says to its replay",
        "The create key and the time it was reserved are written to status before any create is sent. "
        "A create refused on its key's first send (the operator process that reserved the key had not "
        "sent it, and the refusal answers that one attempt, not a retry of one that may have landed) "
        "made nothing: the runner is someone else's, whatever the clocks say "
        "(RunnerIdTaken), and a resource deleted before its create went out is released with no call. "
        "Otherwise (after a restart, whether the last process sent it is unknown) a runner found "
        "unbound is first checked by replaying the create with that key; if the server refuses the "
        "replay (ALREADY_EXISTS, or a body mismatch because the spec was edited meanwhile), the runner "
        "is this resource's when it was created after the key was reserved and its identity matches "
        "(Event CreateConfirmed); it is someone else's when its identity differs or it existed more "
        "than 5 minutes (the clock margin) before. A runner made more than 30 seconds before the key was "
        "in the list the reservation read (unless pagination skipped it), so only one made within those "
        "30 seconds or later reaches this comparison. In between nothing is guessed: the key is kept, "
        "nothing is deleted, adopted or released, and the resource says OwnershipUnknown until a "
        "person sets spec.adopt or deletionPolicy: Orphan.",
        [
            f"{OWN}::test_rule[a-create-refused-on-its-keys-first-send-is-someone-elses-whatever-the-clocks-say]",
            f"{OWN}::test_rule[a-create-refused-on-its-keys-first-send-is-taken-not-unknown]",
            f"{OWN}::test_rule[deleting-with-a-key-never-sent-releases-without-a-replay]",
            "tests/unit/core/test_creation_reads.py::test_a_resource_deleted_before_its_create_went_out_leaves_the_runner_it_found",
            "tests/unit/core/test_creation_reads.py::test_a_create_refused_on_a_retry_may_be_answering_our_own_first_attempt",
            f"{OWN}::test_rule[refused-replay-binds-a-runner-created-after-the-key-was-reserved]",
            f"{OWN}::test_rule[refused-replay-of-an-older-runner-is-taken]",
            f"{OWN}::test_rule[deleting-with-unknown-ownership-neither-deletes-nor-releases]",
            f"{OWN}::test_rule[refused-replay-within-the-clock-margin-is-unknown]",
            f"{OWN}::test_rule[refused-replay-without-a-reservation-time-is-unknown-and-keeps-the-key]",
            f"{OWN}::test_rule[unknown-ownership-with-adopt-is-adopted]",
            f"{OWN}::test_bind_needs_the_identity_to_match",
            f"{SHELL}::test_a_refused_replay_decides_on_the_creation_time[created-after-reservation-is-ours]",
            f"{SHELL}::test_a_refused_replay_decides_on_the_creation_time[created-before-reservation-is-not]",
            f"{SHELL}::test_the_reservation_time_keeps_sub_second_precision",
            f"{E2E}::test_lost_create_response_then_edit_binds_its_own_runner",
        ],
    ),
    (
        "Every resource says how it is, whatever failed",
        "After its first pass every ManagedRunner carries Ready, Synced and Stalled. A problem only a person "
        "can fix (rejected token, missing Secret, misrouted endpoint, taken ID, invalid spec) is "
        "Stalled=True and Ready=False with the reason, and PHASE shows it, so kubectl wait and dashboards "
        "work.",
        [
            f"{SHELL}::test_a_person_fixable_failure_says_ready_false_and_stalled",
            f"{E2E}::test_rejected_token_shows_ready_false",
        ],
    ),
    (
        "A spec this version cannot read is reported once and still deletable",
        "After a rollback to a version that does not know a newer field, the resource says InvalidSpec "
        "once (no Event or status write per pass) and deletion works from identity and credentials alone.",
        [
            f"{SHELL}::test_an_unreadable_spec_is_reported_once",
            f"{SHELL}::test_identity_is_enough_to_delete_an_unreadable_spec",
            f"{E2E}::test_unreadable_spec_is_reported_once_and_still_deletable",
        ],
    ),
    (
        "An operator never comes up watching nothing",
        "kopf reads the API server's discovery once when it starts. An operator (re)started while the "
        "control plane restarts would otherwise serve no ManagedRunner until its next restart, silently: no "
        "deletion, no drift correction. It waits until discovery lists ManagedRunners (logged), and exits "
        "non-zero after RUNNER_OPERATOR_STARTUP_TIMEOUT so the restart is visible.",
        [
            "tests/unit/core/test_startup.py::test_waits_through_empty_and_failing_discovery_then_starts",
            "tests/unit/core/test_startup.py::test_gives_up_with_a_clear_error_when_never_served",
            f"{E2E}::test_operator_started_while_the_api_server_is_down_serves_once_it_is_back",
        ],
    ),
    (
        "The default credential serves only the namespaces allowed to use it",
        "The operator-wide default token acts for the whole organisation, so it is used only for "
        "ManagedRunners in namespaces the configuration allows: "
        "RUNNER_OPERATOR_DEFAULT_CREDENTIALS_NAMESPACES (names or globs, * for all) and/or a label "
        "selector on the Namespace; with neither, the namespaces given to `run -n`, and none when the "
        "operator watches the whole cluster. Anywhere else a ManagedRunner that names no Secret of its "
        "own gets DefaultCredentialsNotAllowed before any read of the default Secret, so no API call is "
        "made for it: it cannot create, adopt, update or delete through the default token, and a runner "
        "it created earlier is neither changed nor deleted (its deletion waits, visibly). A namespace "
        "whose labels cannot be read is not allowed. Messages name the namespace only, never who else "
        "may use the token, and a runner ID claimed in another namespace is reported without that "
        "resource's name.",
        [
            "tests/unit/test_tenancy.py::test_nothing_configured_cluster_wide_allows_no_namespace",
            "tests/unit/test_tenancy.py::test_nothing_configured_allows_exactly_the_watched_namespaces",
            "tests/unit/test_tenancy.py::test_the_selector_decides_where_the_list_does_not",
            "tests/unit/core/test_default_credential_tenancy.py::"
            "test_a_namespace_outside_the_list_is_refused_before_the_default_secret_is_read",
            "tests/unit/core/test_default_credential_tenancy.py::test_a_namespace_that_cannot_be_read_is_not_allowed",
            "tests/unit/core/test_default_credential_tenancy.py::test_a_claim_from_another_namespace_is_reported_without_its_name",
            "tests/e2e/test_tenancy.py::test_a_namespace_not_allowed_cannot_create_adopt_or_delete_through_the_default",
            "tests/e2e/test_tenancy.py::test_a_namespace_label_selector_allows_by_label",
        ],
    ),
    (
        "Two operators never act at once",
        "Replicas elect a leader on a coordination.k8s.io/v1 Lease and only the leader runs the "
        "operator; a standby starts nothing. A standby takes the Lease only once its record has not "
        "changed for the whole lease duration, timed by its own clock from when it first saw that "
        "record, or at once when the Lease was released. The leader renews every retry period and exits "
        "(status 75) as soon as it sees another holder or has not renewed for the renew deadline, which "
        "must be shorter than the lease duration, so it has stopped before anyone else may start. Every "
        "write of the Lease carries the resourceVersion that was read, so two candidates never both win."
        " A clean stop hands the Lease over.",
        [
            "tests/unit/test_leases.py::test_age_counts_from_when_this_process_first_saw_the_record",
            "tests/unit/test_leases.py::test_timings_that_could_let_two_act_are_refused",
            "tests/unit/test_leader.py::test_a_partitioned_leader_stops_before_a_standby_may_start",
            "tests/unit/test_leader.py::test_two_standbys_racing_for_an_expired_lease_cannot_both_win",
            "tests/unit/test_leader.py::test_a_leader_that_sees_another_holder_gives_up_at_once",
            "tests/e2e/test_leader_election.py::test_the_standby_takes_over_and_every_write_happens_once",
            "tests/e2e/test_leader_election.py::test_a_leader_that_sees_another_holder_exits",
        ],
    ),
    (
        "Nothing is created before the finalizer is on the resource",
        "The operator owns its finalizer (kopf is given another name and no deletion handler, so it "
        "never adds or removes ours). A scheduled pass adds it before anything else, with a merge patch "
        "conditional on the resourceVersion it read, and only a pass that released the runner removes "
        "it, with a JSON patch that tests the entry it removes. A ManagedRunner deleted before the "
        "finalizer lands is gone at once, so the planner guards too: no runner is created, adopted or "
        "bound for a resource that does not carry the finalizer yet (the pass reserves the create key, "
        "a status write only, and waits: AwaitingFinalizer). A deletion never waits for it.",
        [
            "tests/unit/core/test_planning.py::test_plan[without-the-finalizer-nothing-is-created]",
            "tests/unit/core/test_planning.py::test_plan[without-the-finalizer-nothing-is-adopted]",
            "tests/unit/core/test_planning.py::test_plan[a-deletion-does-not-wait-for-the-finalizer]",
            "tests/unit/core/test_planning_properties.py::test_planner_invariants",
            "tests/unit/core/test_creation_reads.py::test_nothing_is_created_before_the_finalizer_is_on_the_resource",
        ],
    ),
    (
        "A runner update is applied only when asked, and once per request",
        "applyAvailableUpdate is sent only for a spec.updates.request value status.lastUpdateRequest "
        "has not answered, or under spec.updates.apply: WhenAvailable outside a maintenance exclusion; "
        "never while paused, installing or rolling out, and only after the spec itself is applied. A "
        "request with nothing to apply is answered without a call. The answer is recorded with the "
        "pass that made the call; an operator that dies between the call and that status write asks "
        "again, and the API refuses the second call (FAILED_PRECONDITION) unless yet another release "
        "has arrived on the channel meanwhile.",
        [
            "tests/unit/core/test_planning.py::test_plan[manual-update-waits-for-a-request]",
            "tests/unit/core/test_planning.py::test_plan[paused-blocks-requested-and-automatic-updates]",
            "tests/unit/core/test_planning.py::test_plan[a-request-waits-for-the-rollout]",
            "tests/unit/core/test_planning.py::test_plan[when-available-waits-out-a-maintenance-exclusion]",
            "tests/unit/core/test_quiet_passes.py::test_the_end_of_a_maintenance_exclusion_runs_the_pass",
            "tests/e2e/test_updates.py::test_updates_are_applied_on_request_or_when_available_and_never_while_paused",
        ],
    ),
    (
        "One shard handles each resource, even while the shard count changes",
        "With N shards, a ManagedRunner belongs to the shard that sha256 of its namespace/name, modulo N, "
        "names: the same answer in every process and release. A shard neither schedules nor writes the "
        "status of another shard's object (kopf, which only watches and posts Events, writes nothing "
        "for any object). Each shard index has its own Lease, which records N. A process starts "
        "acting only if, once it holds its Lease, no other live Lease of the operator records another "
        "N; otherwise it hands its Lease back and waits, while the processes of the old N keep acting "
        "until they stop. So two shard counts never act at once, and an object goes unhandled only "
        "while the last process of the old count stops (one Lease duration if it was killed).",
        [
            "tests/unit/core/test_sharding.py::test_every_object_belongs_to_exactly_one_shard",
            "tests/unit/core/test_sharding.py::test_the_shard_of_an_object_is_the_same_in_every_process_and_release",
            "tests/unit/core/test_sharding.py::test_blocking",
            "tests/unit/core/test_watch_feed.py::test_seen_schedules_only_this_shards_objects",
            "tests/unit/core/test_watch_feed.py::test_kopf_has_no_change_handler_and_keeps_no_diff_base",
            "tests/unit/test_leader.py::test_a_new_shard_count_waits_until_the_old_one_has_stopped",
            "tests/unit/test_leader.py::test_two_counts_starting_together_never_both_act",
            "tests/unit/test_leader.py::test_a_killed_old_shard_blocks_for_one_lease_duration_by_our_clock",
            "tests/e2e/test_shards.py::test_shards_split_the_objects_and_a_change_of_count_drops_or_doubles_nothing",
        ],
    ),
    (
        "No pass decides who holds a runner ID before every resource is known",
        "Which ManagedRunner may manage a runner ID, and who still uses a credentials Secret, is read "
        "from indexes over every ManagedRunner in the watched scope. At a start they are filled from one "
        "list before the watch begins, and no pass (a spec change's included) runs until the watch "
        "has delivered every object that list named. One the watch never delivers was deleted in "
        "between: only a later list without it releases its claim, never the wait itself. After that, "
        "every watch event refiles its object, and a deleted object claims and uses nothing.",
        [
            "tests/unit/core/test_indexing.py::test_the_gate_opens_only_after_the_list_and_every_listed_object_delivered",
            "tests/unit/core/test_indexing.py::test_passes_wait_until_the_watch_delivered_every_listed_object",
            "tests/unit/core/test_indexing.py::test_an_object_deleted_before_the_watch_saw_it_releases_its_claim",
            "tests/unit/core/test_indexing.py::test_the_watch_files_every_event_and_opens_the_gate_with_the_last_listed_object",
            "tests/unit/core/test_indexing.py::test_a_deleted_object_claims_and_uses_nothing",
            "tests/e2e/test_ownership.py::test_replacement_onto_a_taken_or_claimed_id_keeps_the_old_runner",
        ],
    ),
]


def render() -> str:
    lines = [
        "# Ownership rules",
        "",
        "<!-- Generated by tests/unit/test_safety_doc.py: UPDATE_DOCS=1 pytest that file. -->",
        "",
        "The operator creates and destroys cloud runners. These rules say when it may, in plain words, each",
        "with the tests that prove it (unit tables run everywhere; the e2e tests run on a real",
        "kube-apiserver, kube-controller-manager and the simulator, and end by asserting the cloud).",
        "",
    ]
    for number, (title, words, proofs) in enumerate(RULES, 1):
        lines += [f"## {number}. {title}", "", words, "", "Proved by:", ""]
        lines += [f"- `{proof}`" for proof in proofs]
        lines.append("")
    lines += [
        "Across all of them, a randomized soak (`bench/soak.py`; `tests/e2e/test_soak.py` runs 2 minutes of",
        "it in CI, on the shared e2e cluster) edits, deletes, re-identifies and pauses 50+ ManagedRunners,",
        "deletes credentials Secrets,",
        "injects API faults and bare 404s, SIGKILLs the operator and restarts the API server, then checks",
        "that the cloud holds exactly the runners the resources say.",
        "",
    ]
    if SOAK.exists():
        lines += ["#" + SOAK.read_text().rstrip("\n"), ""]
    return "\n".join(lines)


def _declared(path: str) -> tuple[set[str], set[str]]:
    """Test function names and pytest.param ids declared in a file."""
    tree = ast.parse((ROOT / path).read_text())
    names = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    ids = set(re.findall(r'id="([^"]+)"', (ROOT / path).read_text()))
    ids |= set(re.findall(r'"(Orphan|Delete)"', (ROOT / path).read_text()))
    return names, ids


@pytest.mark.parametrize("proof", [proof for _, _, proofs in RULES for proof in proofs])
def test_every_cited_test_exists(proof: str) -> None:
    path, _, test = proof.partition("::")
    name, _, param = test.partition("[")
    names, ids = _declared(path)
    assert name in names, proof
    if param:
        assert param.rstrip("]") in ids, proof


def test_safety_doc_is_current() -> None:
    text = render()
    if os.environ.get("UPDATE_DOCS") == "1":
        DOC.write_text(text)
    assert DOC.read_text() == text, "docs/safety.md is stale: UPDATE_DOCS=1 pytest " + __file__
