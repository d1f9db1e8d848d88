"""Memory of the batched-read snapshot (cloud/cache.py): bytes per runner, and the peak of a refresh.

    python -m bench.snapshot_memory [--runners 500] [--baseline f69aaa9]

Builds N runners from examples/managedrunner.yaml through the operator's own translation
(desired_runner), creates them in the in-process simulator, and fills a RunnerCache through the real
CloudClient on an in-memory transport serving the simulator's list pages. The same is done with the
cache and client modules as they were at --baseline (read with `git show`), and the figures are
printed side by side with their ratios. tracemalloc counts Python allocations only; times are taken
without it. A refresh peak includes the page in flight and the entries parsed from it at once (a
whole page of dicts, ~27 KB each, before cloud/pages.py; one at a time since). List bodies are
served in 64 KB chunks, as a connection delivers them: a client that reads a body whole holds its
chunks, their join and its text; one that parses as it reads, about one piece and one runner.
A diagnostic, not part of the product.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import gc
import json
import subprocess
import sys
import time
import tracemalloc
import types
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))

from runner_operator import jsoncodec, resource  # noqa: E402
from runner_operator.cloud import budget, models  # noqa: E402
from runner_operator.cloud import cache as current_cache  # noqa: E402
from runner_operator.cloud.client import COLLECTION, CloudClient  # noqa: E402
from runner_operator.desired import desired_runner  # noqa: E402
from runner_operator.simulator.config import SimulatorConfig, Timings  # noqa: E402
from runner_operator.simulator.core import Simulator  # noqa: E402
from runner_operator.simulator.errors import ApiError  # noqa: E402

BASELINE = "f69aaa9"
"""The last commit whose snapshot held every runner as a full ManagedRunner model."""
BASE_URL = "https://api.bench"
TOKEN = "CW-SECRET-bench"
ENV_SECRETS = {("runner-extra", "registry-mirror-token"): "bench-registry-token"}
MAX_AGE = 60.0
RENAMED = {"ManagedRunner": "CloudRunner"}
"""old name -> current name in cloud/models.py, for --baseline revisions from before the rename."""


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def populate(count: int) -> tuple[Simulator, list[str]]:
    """`count` runners shaped like the example (IDs and clusters vary), stored as the API stores them."""
    example = yaml.safe_load((ROOT / "examples" / "managedrunner.yaml").read_text())
    example["metadata"] |= {"uid": "bench", "generation": 1}
    spec = resource.ManagedRunnerResource.from_body(example).spec
    wire = models.to_wire(desired_runner(spec, ENV_SECRETS), request=True)
    # Frozen time: heartbeats do not move, so a runner read twice is the same runner.
    sim = Simulator(SimulatorConfig(timings=Timings.instant(), clock=lambda: 1.8e9))
    ids = []
    for i in range(count):
        body = copy.deepcopy(wire)
        body["identity"] |= {"runnerId": f"bench-{i:05d}", "clusterId": f"00000000-0000-4000-8000-{i:012d}"}
        sim.create(body, request_id=f"bench-{i}")
        ids.append(body["identity"]["runnerId"])
    sim.list_runners(page_size=count)  # settle lazy transitions and render caches before measuring
    return sim, ids


CHUNK = 64 * 1024
"""What httpcore reads from a socket at a time: list bodies arrive in chunks of at most this."""


class Chunked(httpx.AsyncByteStream):
    """A list body as a connection delivers it, in chunks, so a client that reads it whole pays for
    joining them and one that parses as it reads does not (as on a real network)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for at in range(0, len(self.data), CHUNK):
            yield self.data[at : at + CHUNK]


def serve(sim: Simulator) -> Callable[[httpx.Request], httpx.Response]:
    """The simulator's answers; each list page is encoded once (time is frozen, so it stays the same):
    refresh times then measure the client and the cache, not the in-process server."""
    encoded: dict[str, bytes] = {}

    def handle(request: httpx.Request) -> httpx.Response:
        params = request.url.params
        if request.url.path == COLLECTION and str(request.url) in encoded:
            return httpx.Response(200, stream=Chunked(encoded[str(request.url)]))
        try:
            if request.url.path == COLLECTION:
                data = sim.list_runners(params.get("pageSize"), params.get("pageToken"), copy=False)
            else:
                data = sim.get(request.url.path.rsplit("/", 1)[-1], copy=False)
        except ApiError as exc:
            return httpx.Response(exc.http_status or 500, json={"code": exc.code, "message": str(exc)})
        if request.url.path == COLLECTION:
            encoded[str(request.url)] = json.dumps(data).encode()
            return httpx.Response(200, stream=Chunked(encoded[str(request.url)]))
        return httpx.Response(200, json=data)

    return handle


def baseline_module(rev: str) -> types.ModuleType:
    """cloud/cache.py as it was at `rev`, on cloud/client.py as it was at `rev` (its `CloudClient`)."""
    # Names a baseline imports that were renamed since (issue #15: the cloud's runner is CloudRunner).
    for old_name, current in RENAMED.items():
        if not hasattr(models, old_name):
            setattr(models, old_name, getattr(models, current))
    client = _module_at(rev, "client")
    current_client = sys.modules["runner_operator.cloud.client"]
    sys.modules["runner_operator.cloud.client"] = client  # what the baseline cache imports
    try:
        return _module_at(rev, "cache")
    finally:
        sys.modules["runner_operator.cloud.client"] = current_client


def _module_at(rev: str, name: str) -> types.ModuleType:
    source = subprocess.run(
        ["git", "show", f"{rev}:operator/runner_operator/cloud/{name}.py"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    module = types.ModuleType(f"baseline_{name}_{rev}")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, f"{rev}:{name}.py", "exec"), module.__dict__)
    return module


async def measure(impl: types.ModuleType, sim: Simulator, ids: list[str]) -> dict[str, float]:
    n = len(ids)
    unlimited = budget.RequestBudget(1e9, 10**9)
    client: type[CloudClient] = impl.CloudClient  # the client the cache was written for
    async with client(BASE_URL, TOKEN, transport=httpx.MockTransport(serve(sim)), budget=unlimited) as cloud:
        await impl.RunnerCache(cloud, clock=Clock()).find(ids[0], max_age=MAX_AGE)  # pages encoded
        clock = Clock()
        cache: Any = impl.RunnerCache(cloud, clock=clock)
        gc.collect()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        await cache.find(ids[0], max_age=MAX_AGE)  # first fill
        gc.collect()
        held, fill_peak = (m - base for m in tracemalloc.get_traced_memory())
        tracemalloc.reset_peak()
        clock.now += 2 * MAX_AGE
        await cache.find(ids[0], max_age=MAX_AGE)  # a refresh while the previous snapshot is held
        refresh_peak = tracemalloc.get_traced_memory()[1] - base
        tracemalloc.stop()

        refresh = []
        for _ in range(2):
            clock.now += 2 * MAX_AGE
            started = time.perf_counter()
            await cache.find(ids[0], max_age=MAX_AGE)
            refresh.append(time.perf_counter() - started)
        sample = ids[:: max(1, n // 200)]
        started = time.perf_counter()
        for runner_id in sample:
            await cache.find(runner_id, max_age=MAX_AGE)
        finds = time.perf_counter() - started
        found = await cache.find(ids[-1], max_age=MAX_AGE)
        assert found == await cloud.find(ids[-1]), "the cache changed what a find returns"
        assert cache.stats.direct_gets == 0
    return {
        "snapshot bytes per runner": held / n,
        "peak bytes per runner, first fill": fill_peak / n,
        "peak bytes per runner, refresh": refresh_peak / n,
        "refresh peak MB (snapshot(s) held + page in flight)": refresh_peak / 1e6,
        "snapshot MB at N=3,000 (projected)": held / n * 3000 / 1e6,
        "snapshot MB at N=10,000 (projected)": held / n * 10_000 / 1e6,
        "refresh ms per 1,000 runners": min(refresh) / n * 1e6,
        "cached find us per runner": finds / len(sample) * 1e6,
    }


async def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runners", type=int, default=500, help="fits one list page (cache.PAGE_SIZE)")
    parser.add_argument(
        "--baseline", default=BASELINE, help="git revision of cloud/cache.py and client.py to compare with"
    )
    args = parser.parse_args()
    sim, ids = populate(args.runners)
    before = await measure(baseline_module(args.baseline), sim, ids)
    after = await measure(current_cache, sim, ids)
    print(f"N = {len(ids)} runners shaped like examples/managedrunner.yaml (simulator wire shape)\n")
    print(f"| figure | before ({args.baseline}) | current tree | current / before |")
    print("| --- | ---: | ---: | ---: |")
    for name, old in before.items():
        new = after[name]
        print(f"| {name} | {old:,.1f} | {new:,.1f} | {new / old:.3f} |")
    print_codec(sim, ids)
    return 0


def print_codec(sim: Simulator, ids: list[str]) -> None:
    """The list's JSON work per 1,000 runners: the stdlib against jsoncodec (orjson), best of 5."""
    page = json.dumps(sim.list_runners(len(ids), None, copy=False)).encode()
    entries = json.loads(page)["managedRunners"]  # the simulator caps a page at 1,000
    per = 1000 / len(entries)
    rows = [
        ("parse the page(s)", lambda: json.loads(page), lambda: jsoncodec.loads(page)),
        (
            "write every entry",
            lambda: [json.dumps(e, separators=(",", ":")).encode() for e in entries],
            lambda: [jsoncodec.dumps(e) for e in entries],
        ),
    ]
    print("\n| ms per 1,000 runners | stdlib json | jsoncodec | jsoncodec / stdlib |")
    print("| --- | ---: | ---: | ---: |")
    for name, stdlib, codec in rows:
        old, new = best_ms(stdlib) * per, best_ms(codec) * per
        print(f"| {name} | {old:,.1f} | {new:,.1f} | {new / old:.3f} |")


def best_ms(work: Callable[[], object]) -> float:
    times = []
    for _ in range(5):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return min(times) * 1000


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
