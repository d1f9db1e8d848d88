"""Property tests: wire round trips are lossless and an applied update leaves nothing to update."""

from __future__ import annotations

import copy
from decimal import Decimal
from fractions import Fraction
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from runner_operator.cloud.diff import SPEC_PATHS, _same, compute_update, parse_quantity, semantic_form
from runner_operator.cloud.models import CloudRunner, to_wire

names = st.text(alphabet="abcxyz-1", min_size=1, max_size=6)
maybe_empty = st.sampled_from(["", "a", "b"])
quantities = st.sampled_from(["1", "1000m", "500m", "0.5", "2Gi", "2048Mi", "1e3", "1k", "3"])
str_maps = st.dictionaries(names, maybe_empty, max_size=3)
ints = st.integers(0, 5) | st.integers(0, 5).map(str)
flags = st.booleans()


def _message(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional=fields)


overrides = _message(
    resources=_message(cpuRequest=quantities, memoryLimit=quantities),
    env=str_maps,
    labels=str_maps,
    args=st.lists(names, max_size=2),
    scaling=_message(replicas=ints, autoscalingEnabled=flags),
    tolerations=st.lists(_message(key=names, operator=st.sampled_from(["Equal", "Exists"])), max_size=2),
    affinity=st.dictionaries(names, names | st.integers(), max_size=2),
    cpuRuntimeClass=maybe_empty,
)
spec = _message(
    releaseChannel=st.sampled_from(
        [
            "RELEASE_CHANNEL_STABLE",
            "RELEASE_CHANNEL_RAPID",
            "RELEASE_CHANNEL_UNSPECIFIED",
            "RELEASE_CHANNEL_NEW",
        ]
    ),
    maintenancePolicy=_message(
        windows=st.lists(_message(cron=names, durationSeconds=st.integers(60, 600)), max_size=2),
        exclusions=st.lists(
            _message(startTime=st.sampled_from(["2026-01-01T00:00:00Z", "2026-01-01T01:00:00+01:00"])),
            max_size=1,
        ),
    ),
    overrides=overrides,
    enforceResourceLimits=flags,
    volumes=_message(enabled=flags, csiDriverAllowlist=st.lists(names, max_size=2)),
    tenantMetrics=_message(enabled=flags, image=maybe_empty),
    imagePull=_message(
        policy=st.sampled_from(["SANDBOX_IMAGE_PULL_POLICY_ALWAYS", "SANDBOX_IMAGE_PULL_POLICY_UNSPECIFIED"])
    ),
    dataPlane=st.sampled_from(
        [{}, {"disabled": {}}, {"clusterIp": {}}, {"custom": {"advertisedUri": "https://x"}}]
    ),
)
policy = _message(
    displayName=maybe_empty,
    base=st.dictionaries(names, names, max_size=2),
    constraints=_message(
        resources=_message(maxCpu=quantities, maxGpuCount=ints, requireLimits=flags),
        network=_message(
            allowedEgress=st.lists(_message(httpsHostname=names, any=flags), max_size=2),
            dnsEgress=st.sampled_from(["DNS_EGRESS_MODE_DENY", "DNS_EGRESS_MODE_UNSPECIFIED"]),
        ),
        lifecycle=_message(defaultLifetimeSeconds=ints),
    ),
    controlPlaneAccess=_message(sourceIpAllowlist=_message(cidrs=st.lists(names, max_size=2))),
)
runners = st.fixed_dictionaries(
    {"identity": _message(runnerGroupId=maybe_empty).map(lambda i: {"runnerId": "prod-1", **i})},
    optional={"displayName": maybe_empty, "spec": spec, "policy": policy, "etag": names},
).map(CloudRunner.model_validate)


def _apply(observed: CloudRunner, mask: tuple[str, ...], body: CloudRunner) -> CloudRunner:
    """What a server does with a PATCH: copy each masked path from the body, absent resets."""
    stored, sent = to_wire(observed), to_wire(body)
    for path in mask:
        head, _, tail = path.partition(".")
        source: Any = sent.get(head)
        target = stored
        if tail:
            source = (source or {}).get(tail)
            target = stored.setdefault(head, {})
            head = tail
        if source is None:
            target.pop(head, None)
        else:
            target[head] = copy.deepcopy(source)
    return CloudRunner.model_validate(stored)


@settings(max_examples=150, deadline=None)
@given(runners)
def test_a_runner_needs_no_update_against_itself(runner: CloudRunner) -> None:
    assert compute_update(runner, runner) is None


@settings(max_examples=150, deadline=None)
@given(runners)
def test_wire_round_trip_is_lossless(runner: CloudRunner) -> None:
    again = CloudRunner.model_validate(to_wire(runner))
    assert again == runner
    assert compute_update(runner, again) is None


@settings(max_examples=200, deadline=None)
@given(runners, runners)
def test_applying_the_update_converges(desired: CloudRunner, observed: CloudRunner) -> None:
    update = compute_update(desired, observed)
    if update is None:
        return
    assert list(update.mask) == sorted(set(update.mask))
    assert not any(p in update.mask for p in ("identity.runnerId", "identity.zone", "identity.clusterId"))
    assert compute_update(desired, _apply(observed, update.mask, update.body)) is None


@settings(max_examples=200, deadline=None)
@given(runners, runners)
def test_equal_values_short_cut_nothing(first: CloudRunner, second: CloudRunner) -> None:
    """`_same` compares by value before meaning: it must agree with comparing forms alone, for
    values that are equal (a copy, as a server echoes them) and for values that are not."""
    for mine, theirs in ((first, second), (first, CloudRunner.model_validate(to_wire(first)))):
        pairs = [(mine.policy, theirs.policy)] + [
            (getattr(mine.spec, name, None), getattr(theirs.spec, name, None)) for name in SPEC_PATHS
        ]
        for a, b in pairs:
            assert _same(a, b) == (semantic_form(a) == semantic_form(b))


@given(
    st.integers(0, 10**6),
    st.sampled_from([("Ki", 2**10), ("Mi", 2**20), ("k", 10**3), ("m", Fraction(1, 1000))]),
)
def test_quantity_suffixes_scale_exactly(number: int, suffix: tuple[str, int | Fraction]) -> None:
    text, factor = suffix
    plain = Decimal(number) * Decimal(Fraction(factor).numerator) / Decimal(Fraction(factor).denominator)
    assert parse_quantity(f"{number}{text}") == number * factor
    assert parse_quantity(str(plain)) == number * factor
