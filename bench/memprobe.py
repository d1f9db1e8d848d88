"""Run the operator CLI with a memory probe: SIGUSR1 writes where the live Python memory is.

    python -m bench.memprobe OUT_PREFIX run -n NAMESPACE

Each SIGUSR1 writes OUT_PREFIX-<k>.txt: the top allocation sites (tracemalloc, MEMPROBE_FRAMES
frames, default 3), the live memory by the innermost operator or kopf frame that asked for it (give
it enough frames to reach past json, pydantic and asyncio: about 8; 25 took a probed operator
at N = 1,000 to 13 GB, and 8 took one at N = 300 to 10 GB over half an hour), the most numerous
live object types and the bytes held by each type, who holds the live sets, and the allocators'
own account (pymalloc's arenas, glibc's heap: in use against kept free), before and after a full
collection (which the probe runs: cyclic garbage counts as in use until then). MEMPROBE_FRAMES=0 leaves
tracemalloc off and writes the rest: cheap enough for thousands of objects.
A diagnostic for the scale benchmark, not part of the product.
"""

from __future__ import annotations

import ctypes
import gc
import os
import re
import runpy
import signal
import sys
import tempfile
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
        lines.extend(_holders(set))
        lines.extend(_duplicate_strings())
        lines.extend(_allocators())
        lines.extend(["", f"gc.collect(): {gc.collect()} unreachable objects freed", *_allocators()[2:]])
        lines.extend(_modules())
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


_SHOWN = re.compile(r"[a-z0-9][a-z0-9./-]{0,80}|\d+")
"""Values a report may show (names, uids, numbers); anything else, a token perhaps, only by length."""


def _duplicate_strings() -> list[str]:
    """Equal strings held as separate objects (a uid parsed from each body that named it): the bytes
    that one shared copy each would save, and the values with the most copies."""
    copies: dict[str, dict[int, int]] = {}
    for obj in gc.get_objects():
        for ref in gc.get_referents(obj):
            if type(ref) is str:
                copies.setdefault(ref, {})[id(ref)] = sys.getsizeof(ref)
    wasted = Counter({value: sum(found.values()) - max(found.values()) for value, found in copies.items()})
    lines = ["", f"strings held twice or more: {sum(wasted.values()) / 2**20:.2f} MiB in extra copies"]
    for value, size in wasted.most_common(12):
        shown = repr(value) if _SHOWN.fullmatch(value) else f"<{len(value)} characters>"
        lines.append(f"{size:9d} B {len(copies[value]):6d} copies  {shown}")
    return lines


def _holders(kind: type) -> list[str]:
    """Who refers to the live objects of one type, by the referrer's type ("dict of X" for the
    attribute dict of an X): a census says how many sets there are, this says whose they are."""
    holders: dict[int, object] = {}
    for obj in gc.get_objects():
        for ref in gc.get_referents(obj):
            if type(ref) is kind:
                holders[id(ref)] = obj
    wanted = {id(h) for h in holders.values() if type(h) is dict}
    owners: dict[int, str] = {}
    for obj in gc.get_objects():
        for ref in gc.get_referents(obj):
            if id(ref) in wanted and type(ref) is dict:
                owners[id(ref)] = type(obj).__qualname__
    counts: Counter[str] = Counter()
    for holder in holders.values():
        name = type(holder).__qualname__
        counts[f"dict of {owners.get(id(holder), '?')}" if name == "dict" else name] += 1
    lines = ["", f"holders of live {kind.__name__} objects:"]
    lines.extend(f"{count:9d} {name}" for name, count in counts.most_common(20))
    return lines


class _MallInfo2(ctypes.Structure):
    _names = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks")
    _fields_ = [(name, ctypes.c_size_t) for name in (*_names, "fordblks", "keepcost")]


def _allocators() -> list[str]:
    """Where the process's memory sits below the objects: pymalloc's arenas (small objects) and
    glibc's heap (the rest), each split into in use and kept free; RSS minus both is libraries,
    stacks and C extensions' own mappings."""
    lines = ["", "allocators:"]
    with tempfile.TemporaryFile("w+") as out:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(out.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        text = out.read()
    summary = re.compile(r"^(# arenas|# bytes|# unused|\d+ arenas \*|Total )")
    lines.extend(f"  pymalloc {line.strip()}" for line in text.splitlines() if summary.match(line))
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _MallInfo2
        info = libc.mallinfo2()
    except (OSError, AttributeError):
        return [*lines, "  glibc: no mallinfo2 here"]
    mib = 2**20
    lines.append(
        f"  glibc heap {info.arena / mib:.1f} MiB (in use {info.uordblks / mib:.1f},"
        f" free {info.fordblks / mib:.1f}), mmapped blocks {info.hblkhd / mib:.1f} MiB in {info.hblks}"
    )
    with open("/proc/self/status") as status:
        wanted = ("VmRSS", "RssAnon", "RssFile")
        lines.extend(f"  {line.strip()}" for line in status if line.startswith(wanted))
    return lines


def _modules() -> list[str]:
    """Imported modules by package (three name parts): a library that imports its models lazily
    shows here what the run pulled in."""
    counts = Counter(".".join(name.split(".")[:3]) for name in sys.modules)
    return ["", "modules by package:", *(f"{n:9d} {name}" for name, n in counts.most_common(15))]


def _owner(traceback: tracemalloc.Traceback) -> str:
    """The innermost operator or kopf frame of an allocation, as "folder/file.py:line"."""
    for frame in reversed(traceback):
        if "/runner_operator/" in frame.filename or "/kopf/" in frame.filename:
            return f"{'/'.join(frame.filename.rsplit('/', 2)[-2:])}:{frame.lineno}"
    return "elsewhere"


if __name__ == "__main__":
    main()
