"""Memory of the audit archiver's local half, alone and fast: does the process stay flat while
it folds, replicates and compacts? Prints ONE JSON object on stdout, progress on stderr.

    PYTHONPATH=. python3 tools/bench_archive_memory.py [--seconds 150] [--rate 200] \
        [--compact-segments 20]

No server and no service: it opens an ``ArchiveStore`` and runs a ``Replicator`` on a
``DirectoryReplica`` (both in a new temporary directory, removed at the end), inserts
``--rate`` audit rows a second into the store (in batches of ``--batch``, as the folder does),
cuts a segment every ``--segment-every`` seconds and compacts every ``--compact-segments``
segments (0: never), so an hour of the service's archive passes in a minute or two. Every
``--every`` seconds it samples, for this process:

* ``service_rss_kib``: resident memory (``VmRSS``), named as the soak names the service's, whose
  bound it is judged by;
* ``thread_arenas_kib``: what glibc's per-thread arenas hold resident (anonymous mappings in
  64 MiB-aligned heaps: where ``trio.to_thread`` workers' ``malloc`` goes), and
  ``malloc_free_kib``: what glibc holds free (``mallinfo2``'s ``fordblks``), Linux only.

After a warm-up (the first fifth of the samples) it fits a line to each (``soak.report``) and
reports its slope per hour and per 1,000 rows; the RSS is judged by the soak's bound for the
service's memory, the other two are there to explain it. This is a tool, not a test.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio
from soak import Sample, finish, report

from codemojex.audit.archive import ArchiveStore
from codemojex.audit.replica import DirectoryReplica
from codemojex.audit.replicator import Replicator
from codemojex.audit.rows import AuditRow
from echomq_trio import ids

KIB = 1024
RSS = "service_rss_kib"
EXPLAINED = ("first", "last", "per_hour", "per_1000_notices")
HEAP_ALIGN = 64 << 20  # glibc's per-thread heaps are this big and this aligned (64-bit)


class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]  # fmt: skip


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _thread_arenas_kib() -> int:
    """Resident KiB of anonymous mappings that start on a 64 MiB boundary (glibc's thread heaps)."""
    total, counting = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if "-" in fields[0] and not fields[0].endswith(":"):
            start = int(fields[0].split("-")[0], 16)
            counting = len(fields) < 6 and start % HEAP_ALIGN == 0
        elif counting and fields[0] == "Rss:":
            total += int(fields[1])
    return total


def _malloc_free_kib() -> int:
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = MallInfo2
    except (OSError, AttributeError):
        return 0
    return int(libc.mallinfo2().fordblks) // KIB


def _rows(first: int, n: int) -> list[AuditRow]:
    now = int(time.time() * 1000)
    out = []
    for i in range(first, first + n):
        notice = ids.generate("NOT")
        text = f"soak notice {i} " + "x" * 80
        out.append(AuditRow(notice, ids.generate("JOB"), 7_000_000 + i % 400, "delivered", i, 1,
                            None, ids.timestamp_ms(notice), now, text))  # fmt: skip
    return out


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="bench-archive-"))
    store = ArchiveStore(folder / "audit.sqlite")
    replicator = Replicator(store, DirectoryReplica(folder / "replica"), holder="bench",
                            segment_rows=10**6, segment_every_s=args.segment_every, poll_s=0.02,
                            compact_segments=args.compact_segments or 10**9)  # fmt: skip
    samples: list[Sample] = []
    rows = 0
    try:
        await store.open()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: replicator.run(new_db=True))
            await replicator.reconciled.wait()
            started = trio.current_time()
            next_sample = started
            while (now := trio.current_time()) - started < args.seconds:
                if now >= next_sample:
                    next_sample += args.every
                    stats = replicator.statistics()
                    values = {"service_rss_kib": float(_status_kib("VmRSS")),
                              "thread_arenas_kib": float(_thread_arenas_kib()),
                              "malloc_free_kib": float(_malloc_free_kib())}  # fmt: skip
                    samples.append(Sample(now - started, rows, values))
                    print(f"{now - started:6.0f} s, {rows} rows, {stats.segments} segments, "
                          f"{stats.compactions} compactions, rss {values[RSS]:.0f} KiB, thread "
                          f"arenas {values['thread_arenas_kib']:.0f} KiB",
                          file=sys.stderr, flush=True)  # fmt: skip
                await store.insert(_rows(rows, args.batch))
                rows += args.batch
                await trio.sleep(args.batch / args.rate)
            nursery.cancel_scope.cancel()
    finally:
        await store.aclose()
        shutil.rmtree(folder, ignore_errors=True)
    measures = report(samples)
    for name, measure in measures.items():
        if name != RSS:  # explanations, not judged
            measures[name] = {k: v for k, v in measure.items() if k in EXPLAINED}
    stats = replicator.statistics()
    return {
        "seconds": args.seconds,
        "rate_per_s": args.rate,
        "segment_every_s": args.segment_every,
        "compact_segments": args.compact_segments,
        "malloc_arena_max": os.environ.get("MALLOC_ARENA_MAX"),
        "rows": rows,
        "segments": stats.segments,
        "compactions": stats.compactions,
        "samples": len(samples),
        "measures": measures,
        "ok": measures.get(RSS, {}).get("ok", False),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tools/bench_archive_memory.py",
                                description=__doc__.split("\n\n")[0])  # fmt: skip
    p.add_argument("--seconds", type=float, default=150.0)
    p.add_argument("--rate", type=float, default=200.0, help="audit rows a second")
    p.add_argument("--batch", type=int, default=10, help="rows a transaction")
    p.add_argument("--segment-every", type=float, default=0.1, help="seconds between segments")
    p.add_argument("--compact-segments", type=int, default=20, help="0: never compact")
    p.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    args = p.parse_args(argv)
    if min(args.seconds, args.rate, args.batch, args.segment_every, args.every) <= 0:
        p.error("--seconds, --rate, --batch, --segment-every and --every must be positive")
    return finish(trio.run(bench, args))


if __name__ == "__main__":
    sys.exit(main())
