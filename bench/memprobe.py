"""Run the operator CLI with a memory probe: SIGUSR1 writes where the live Python memory is.

    python -m bench.memprobe OUT_PREFIX run -n NAMESPACE

Each SIGUSR1 writes OUT_PREFIX-<k>.txt: the top allocation sites (tracemalloc, MEMPROBE_FRAMES
frames, default 3), the live memory by the innermost operator or kopf frame that asked for it (give
it enough frames to reach past json, pydantic and asyncio: about 8; 25 took a probed operator
at N = 1,000 to 13 GB, and 8 took one at N = 300 to 10 GB over half an hour), the most numerous
live object types and the bytes held by each type. MEMPROBE_FRAMES=0 leaves tracemalloc off and
writes only the types: cheap enough for thousands of objects.
A diagnostic for the scale benchmark, not part of the product.
"""

from __future__ import annotations

import gc
import os
import runpy
import signal
import sys
import tracemalloc
from collections import Counter
from types import FrameType


def main() -> None:
    prefix = sys.argv[1]
    sys.argv = ["runner_operator.cli", *sys.argv[2:]]
    frames = int(os.environ.get("MEMPROBE_FRAMES", "3"))
    if frames:
        tracemalloc.start(frames)
    taken = 0

    def dump(_signum: int, _frame: FrameType | None) -> None:
        nonlocal taken
        taken += 1
        lines = _traced() if frames else []
        lines.extend(_by_type())
        with open(f"{prefix}-{taken}.txt", "w") as out:
            out.write("\n".join(lines) + "\n")

    signal.signal(signal.SIGUSR1, dump)
    runpy.run_module("runner_operator.cli", run_name="__main__", alter_sys=True)


def _traced() -> list[str]:
    snapshot = tracemalloc.take_snapshot()
    current, peak = tracemalloc.get_traced_memory()
    lines = [f"traced now {current / 2**20:.1f} MiB, peak {peak / 2**20:.1f} MiB", ""]
    stats = snapshot.statistics("traceback")  # one per distinct traceback, not per live block
    for stat in stats[:25]:
        lines.append(f"{stat.size / 2**20:8.1f} MiB {stat.count:9d} blocks")
        lines.extend(f"        {line}" for line in stat.traceback.format()[-6:])
    lines.extend(["", "by the innermost operator or kopf frame (who asked for the memory):"])
    owners: Counter[str] = Counter()
    for stat in stats:
        owners[_owner(stat.traceback)] += stat.size
    lines.extend(f"{size / 2**20:8.2f} MiB  {owner}" for owner, size in owners.most_common(25))
    lines.append("")
    return lines


def _by_type() -> list[str]:
    """Live objects by type: how many, and their bytes (str and bytes, which the collector does not
    track, counted once each through the tracked objects that refer to them)."""
    counts: Counter[str] = Counter()
    sizes: Counter[str] = Counter()
    leaves: set[int] = set()
    for obj in gc.get_objects():
        name = type(obj).__name__
        counts[name] += 1
        sizes[name] += sys.getsizeof(obj)
        for ref in gc.get_referents(obj):
            if type(ref) in (str, bytes) and id(ref) not in leaves:
                leaves.add(id(ref))
                counts[type(ref).__name__] += 1
                sizes[type(ref).__name__] += sys.getsizeof(ref)
    lines = ["live objects by bytes (shallow):"]
    for name, size in sizes.most_common(30):
        lines.append(f"{size / 2**20:8.2f} MiB {counts[name]:9d} {name}")
    return lines


def _owner(traceback: tracemalloc.Traceback) -> str:
    """The innermost operator or kopf frame of an allocation, as "folder/file.py:line"."""
    for frame in reversed(traceback):
        if "/runner_operator/" in frame.filename or "/kopf/" in frame.filename:
            return f"{'/'.join(frame.filename.rsplit('/', 2)[-2:])}:{frame.lineno}"
    return "elsewhere"


if __name__ == "__main__":
    main()
