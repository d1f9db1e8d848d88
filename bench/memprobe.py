"""Run the operator CLI with a memory probe: SIGUSR1 writes where the live Python memory is.

    python -m bench.memprobe OUT_PREFIX run -n NAMESPACE

Each SIGUSR1 writes OUT_PREFIX-<k>.txt: the top allocation sites (tracemalloc, MEMPROBE_FRAMES
frames, default 3), the live memory by the innermost operator or kopf frame that asked for it (give
it enough frames to reach past json, pydantic and asyncio: about 8; 25 took a probed operator
at N = 1,000 to 13 GB), and the most numerous live object types.
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
    tracemalloc.start(int(os.environ.get("MEMPROBE_FRAMES", "3")))
    taken = 0

    def dump(_signum: int, _frame: FrameType | None) -> None:
        nonlocal taken
        taken += 1
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
        types = Counter(type(o).__name__ for o in gc.get_objects())
        lines.extend(f"{count:9d} {name}" for name, count in types.most_common(30))
        with open(f"{prefix}-{taken}.txt", "w") as out:
            out.write("\n".join(lines) + "\n")

    signal.signal(signal.SIGUSR1, dump)
    runpy.run_module("runner_operator.cli", run_name="__main__", alter_sys=True)


def _owner(traceback: tracemalloc.Traceback) -> str:
    """The innermost operator or kopf frame of an allocation, as "folder/file.py:line"."""
    for frame in reversed(traceback):
        if "/runner_operator/" in frame.filename or "/kopf/" in frame.filename:
            return f"{'/'.join(frame.filename.rsplit('/', 2)[-2:])}:{frame.lineno}"
    return "elsewhere"


if __name__ == "__main__":
    main()
