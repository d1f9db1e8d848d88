"""Throughput and memory of the control-plane simulator with 5,000 stored runners, on one core.

Server and asyncio load generator share one process and one event loop (so one core), over
127.0.0.1. Usage: python bench/simulator_bench.py [--runners 5000] [--seconds 5] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "operator"))

from runner_operator.simulator.config import DEV_ADMIN_TOKEN, SimulatorConfig
from runner_operator.simulator.server import serve

RUNNERS = "/v1/sandbox/managedRunners"


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def body(i: int) -> dict[str, object]:
    return {
        "identity": {"runnerId": f"runner-{i:05d}", "zone": "us-east-04a", "clusterId": f"cluster-{i:05d}"},
        "displayName": f"Runner {i}",
        "spec": {
            "maintenancePolicy": {"windows": [{"cron": "0 2 * * SAT", "durationSeconds": 3600}]},
            "overrides": {
                "env": {"NODE_ALLOCATION_BUDGET": "8"},
                "resources": {"cpuRequest": "1", "memoryRequest": "2Gi"},
            },
            "dataPlane": {"disabled": {}},
        },
        "policy": {
            "constraints": {
                "resources": {"defaultCpu": "1", "maxCpu": "8", "maxMemory": "32Gi", "maxGpuCount": "0"},
                "lifecycle": {"defaultLifetimeSeconds": 3600},
            }
        },
    }


async def measure(
    seconds: float,
    concurrency: int,
    one: Callable[[aiohttp.ClientSession, random.Random], Awaitable[int]],
    session: aiohttp.ClientSession,
) -> tuple[float, int]:
    done = 0
    errors = 0
    stop = time.perf_counter() + seconds

    async def worker(seed: int) -> None:
        nonlocal done, errors
        rng = random.Random(seed)
        while time.perf_counter() < stop:
            status = await one(session, rng)
            done += 1
            errors += status >= 400

    started = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    return done / (time.perf_counter() - started), errors


async def main(runners: int, seconds: float, concurrency: int) -> None:
    gc.collect()
    before = rss_kib()
    server = await serve(SimulatorConfig(log_requests=False, require_request_id=False))
    sim = server.simulator
    empty = rss_kib()
    for i in range(runners):
        sim.create(body(i), f"req-{i}")
    sim.advance_clock(10)  # everything installed
    gc.collect()
    loaded = rss_kib()
    headers = {"Authorization": f"Bearer {DEV_ADMIN_TOKEN}"}
    connector = aiohttp.TCPConnector(limit=concurrency)
    session = aiohttp.ClientSession(server.url, headers=headers, connector=connector)

    async def get(s: aiohttp.ClientSession, rng: random.Random) -> int:
        async with s.get(f"{RUNNERS}/runner-{rng.randrange(runners):05d}") as r:
            await r.read()
            return r.status

    async def list_page(s: aiohttp.ClientSession, rng: random.Random) -> int:
        params = {}
        if rng.random() < 0.9:
            params["pageToken"] = sim._encode_token(f"runner-{rng.randrange(runners):05d}", None)
        async with s.get(RUNNERS, params=params) as r:
            await r.read()
            return r.status

    async def patch(s: aiohttp.ClientSession, rng: random.Random) -> int:
        runner_id = f"runner-{rng.randrange(runners):05d}"
        async with s.patch(
            f"{RUNNERS}/{runner_id}",
            params={"updateMask": "displayName"},
            json={"displayName": str(rng.random())},
        ) as r:
            await r.read()
            return r.status

    async def mix(s: aiohttp.ClientSession, rng: random.Random) -> int:
        roll = rng.random()
        return await (get if roll < 0.7 else list_page if roll < 0.8 else patch)(s, rng)

    results = {}
    try:
        for name, one in (
            ("get", get),
            ("list page (50)", list_page),
            ("patch displayName", patch),
            ("mix 70/10/20", mix),
        ):
            rate, errors = await measure(seconds, concurrency, one, session)
            results[name] = rate
            print(f"{name:<20} {rate:8.0f} req/s  errors={errors}")
        peak = rss_kib()
    finally:
        await session.close()
        await server.close()
    print(f"runners stored       {len(sim)}")
    print(f"RSS before server    {before / 1024:8.1f} MiB")
    print(f"RSS empty simulator  {empty / 1024:8.1f} MiB")
    print(f"RSS with runners     {loaded / 1024:8.1f} MiB  ({(loaded - empty) / runners:.1f} KiB/runner)")
    print(f"RSS after load       {peak / 1024:8.1f} MiB")
    print(f"get : list-page ratio {results['get'] / results['list page (50)']:.1f}x")
    print(f"cpu count visible {os.cpu_count()}, affinity {len(os.sched_getaffinity(0))}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runners", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    asyncio.run(main(args.runners, args.seconds, args.concurrency))
