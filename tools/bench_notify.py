"""Benchmark of the codemojex notification pipeline; prints ONE JSON object on stdout.

Run ``python tools/bench_notify.py [--url URL] [--quick] [--workers N]`` with the repository on
``PYTHONPATH``. Without ``--url`` it starts the embedded server (``open_bus()`` with no URL); with
one, it deletes its own queues' keys afterwards. Notices go through the real pipeline:
``notify`` -> the bus (one lane per chat, limit 1) -> ``NotificationWorker`` with the shared
``RateLimiter(bus, Limits(), tag=queue)`` (default margin, or ``--margin-ms``) -> real HTTP on
loopback -> the Bot API stand-in (``codemojex.standin``), which enforces the REAL default limits
(``Limits()``: the bot 30 per 1000 ms, a private chat 3 per 3000 ms, a group 20 per 60 s) and
answers 429 when one is exceeded. Every time below is the stand-in's arrival time of a message
(``Delivery.at``, ``time.monotonic`` seconds). This is a benchmark, not a test: it reports, and
its ``goals`` say whether each goal was met. It stops by itself: about 30 s (``--quick`` 15 s),
each phase has a deadline, and a hard limit (110 s, ``--quick`` 60 s) cancels the rest.

Workers: by default one ``NotificationWorker`` (its default concurrency) and one ``Metronome``
(``beat_ms=100``) run in this process, like ``in_process_worker`` in
``tests/codemojex/notify/test_pipeline.py``; their ``statistics()`` go into the diagnostics.
With ``--workers N`` they are N processes of ``python -m codemojex.notify --queue QUEUE
--telegram-api-url API_URL --beat-ms 100`` instead (the real limits and the default margin, as
in this process; the server and the token through the environment), stated in the JSON as
``limiter_margin_ms``. Each phase has a queue of its own and its own workers.

1. Saturation (``saturation_*``): ``CHATS`` private chats x 4 notices (150 x 4 = 600; ``--quick``
   60 x 4 = 240), all enqueued with ``notify`` before the workers start. One chat may send 1/s
   (burst 3), so 150 chats could use 150/s: the bot's 30/s is what binds. The per-chat limit
   need not (served in turn at 30/s a chat's notices are 5 s apart, 2 s with ``--quick``); it
   does bind when a lane that has just sent is served again at once, which shows as
   ``rate limit (chat)`` deferrals.

   * ``saturation_sends_per_s``: the steady rate, ``30 / mean(t[i] - t[i-30])`` over every
     delivery ``i >= 30`` (arrival times in order). A sliding window of 30 per 1 s lets
     delivery ``i`` go only once delivery ``i-30`` has left the window, so at saturation that
     distance is the window's period: 1000 ms plus whatever the pipeline adds (the limiter's
     margin, the time to notice that a slot is free, HTTP). This excludes the opening burst (the
     first 30 go at once into the empty window and need no gap) without cutting the run at an
     arbitrary point. ``details.saturation.after_first_window_sends_per_s`` cross-checks it:
     deliveries after the first 30 divided by the time from the 30th to the last. The two agree
     when the run ends as it went; the cross-check is lower when the end trails off (the last
     30 arrivals spread over more than a window: ``last_window_span_s`` > 1.03), because the
     steady rate weighs the last 30 arrivals by their mean time, the cross-check by the last.
   * ``budget_per_s``: 30. ``fraction_of_budget``: the steady rate / 30 (goal >= 0.985, issue
     11). A send's window counts from its answer once the worker has it (``RateLimiter.sent``),
     so the margin binds only sends still unanswered when the slot 30 later is given out;
     ``details.saturation.margin_ceiling_fraction`` is the ceiling if every one were:
     ``1000 / (1000 + margin)``, 0.971 at 30 ms. ``limiter.confirmed`` counts the stamped
     sends.
   * ``whole_run_sends_per_s``: all notices / (last arrival - the moment the workers were
     ready), opening burst included; ``details.saturation.first_to_last_sends_per_s`` is
     (N - 1) / (last - first arrival).
   * ``max_in_any_1s_window``: the most arrivals in any half-open 1 s span (must be <= 30: the
     budget is never exceeded); ``stand_in_429s``: 429s the stand-in had to answer (should be 0).
   * ``per_chat_max_in_1s`` / ``per_chat_max_in_3s``: the most arrivals for any single chat in
     any 1 s / 3 s span (<= 3 per 3 s expected). ``details.saturation.in_order``: every chat got
     its notices in the order sent.
   * ``details.saturation.cycle_excess_ms``: ``t[i] - t[i-30] - 1000 ms``, i.e. how much longer
     than the window each send had to wait for its slot (p50/p90/mean/max). The steady rate is
     ``30 / (1 + mean / 1000)``, so this says where the missing fraction goes; the margin is
     part of it by construction.
   * ``details.saturation.limiter_state`` (all modes): the limiter's keys sampled every 100 ms:
     the share of samples in which the global window had free slots while lanes were waiting
     (budget left unused although work was ready), the mean free slots then, the most lanes
     waiting, and the most slots reserved ahead (global-window entries in the future: a chat
     blocked only by the global window gets the next free slot reserved and comes back for it).
   * ``details.saturation.returns`` (all modes, from the queue's events stream, on the server
     clock): the waits the deferrals handed out, by kind (``rate limit (global)``, ``rate limit
     (chat)``, ``429 (...)``); for each deferral the lateness of its return (when the notice was
     claimed again minus when the deferral said to come back: the lane wait, the metronome, the
     claim); and how many returns were deferred again. ``deferrals`` (by reason, from the same
     stream) and ``deferred_total`` (the queue's metrics) also come from the server.
   * In process only: ``limiter`` is ``RateLimiter.statistics()`` (sends taken, denials by
     reason and the waits they handed out, pauses) and ``worker`` is
     ``NotificationWorker.statistics()``.

2. Flood fairness (``flood_*``): 1,000 notices to one chat are enqueued, the workers start, and
   once 3 of them have arrived (the flood is flowing), 100 single notices go to 100 other chats,
   one ``notify`` at a time. A small chat's delay is its stand-in arrival time minus the moment
   its ``notify`` returned, both on ``time.monotonic``. (``trio.current_time()`` is NOT that
   clock: trio's ``SystemClock`` adds a random offset of 10,000-200,000 s to
   ``time.perf_counter``; ``details.clock`` shows the measured offset, its drift during the run,
   and that perf_counter and monotonic are the same clock here, so the stamps use
   ``time.monotonic()`` directly.) Reported: ``flood_small_delay_ms`` p50/p99/max/count; the
   expected bound ``flood_expected_bound_ms`` = 100 / 30 s (100 sends at the bot's rate); and
   ``flood_arrived_by_last_small``: flood notices that had arrived when the last small one did
   (at 1/s per chat, about 3 + the seconds elapsed). The flood is then stopped (cancelled), not
   drained.

Also: ``python``, ``server_version``, ``limiter_margin_ms``, ``workers``, ``total_s`` (wall time
of the whole run) and ``goals``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import trio
from _bench import drop_queue, server_version

import codemojex
from codemojex.audit import Archiver, DirectoryReplica
from codemojex.notify import DEFAULT_MARGIN_MS, NotificationWorker, RateLimiter, notify
from codemojex.standin import Delivery, TelegramStandIn, most_in_span, open_stand_in
from codemojex.telegram import Limits, open_bot
from echomq_trio import Bus, Metronome, events, jobs, open_bus

TOKEN = "123456:BENCH"
LIMITS = Limits()
NOTICES_PER_CHAT = 4
CHATS = 150
QUICK_CHATS = 60
FIRST_CHAT = 10_000
FLOOD_CHAT = 7
FLOOD_NOTICES = 1_000
SMALL_CHATS = 100
FIRST_SMALL_CHAT = 20_000
FLOWING_AFTER = 3  # flood arrivals before the small notices are sent
METRONOME_BEAT_MS = 100  # as in tests/codemojex/notify/test_pipeline.py
WORKER_MODULE = "codemojex.notify"  # a worker process, with the real limits by default
HARD_LIMIT_S = 110.0  # the whole run is cancelled after this (--quick: QUICK_HARD_LIMIT_S)
QUICK_HARD_LIMIT_S = 60.0
SATURATION_LIMIT_S = 45.0  # the saturation phase stops here even if notices are left
QUICK_SATURATION_LIMIT_S = 20.0
READY_LIMIT_S = 15.0  # a worker process must print "ready" within this
FLOWING_LIMIT_S = 10.0  # the flood must have begun to arrive within this
SMALL_LIMIT_S = 20.0  # the small notices of the flood phase stop being awaited after this
SETTLE_LIMIT_S = 3.0  # after the last arrival, how long to wait for the last acks
SAMPLE_S = 0.1  # how often the limiter's state is sampled during the saturation phase
STOP_LIMIT_S = 5.0  # a worker process gets this long after SIGTERM before SIGKILL
GOAL_FRACTION = 0.985
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(codemojex.__file__)))


# --- helpers -------------------------------------------------------------------------------


def _round(value: float, digits: int = 1) -> float:
    return round(value, digits)


def _percentile(ordered: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile of an ascending sequence."""
    index = max(0, math.ceil(pct / 100 * len(ordered)) - 1)
    return ordered[index]


def _finite(value: float, digits: int = 1) -> float | None:
    """``value`` rounded, or ``None`` (JSON ``null``) when it is infinite: not measured."""
    return round(value, digits) if math.isfinite(value) else None


def _le(value: float | None, bound: float) -> bool:
    """``value <= bound``; an unmeasured value (``None``) is not within any bound."""
    return value is not None and value <= bound


def _summary(values: Sequence[float], digits: int = 1) -> dict[str, Any]:
    """p50/p90/p99/mean/max/min/count of ``values`` (empty: just the count); an infinite value
    (something that never happened) makes the figures it reaches ``null``."""
    if not values:
        return {"count": 0}
    ordered = sorted(values)
    return {
        "p50": _finite(_percentile(ordered, 50), digits),
        "p90": _finite(_percentile(ordered, 90), digits),
        "p99": _finite(_percentile(ordered, 99), digits),
        "mean": _finite(sum(ordered) / len(ordered), digits),
        "max": _finite(ordered[-1], digits),
        "min": _finite(ordered[0], digits),
        "count": sum(1 for v in ordered if math.isfinite(v)),
    }


async def _events(bus: Bus, queue: str) -> list[events.Event]:
    """The events of ``queue``, oldest first (the stream keeps about the last 10,000)."""
    out: list[events.Event] = []
    after = "-"
    while page := await events.read(bus, queue, after, count=1000):
        out += page
        after = page[-1].stream_id
    return out


def _deferrals(log: Sequence[events.Event]) -> dict[str, int]:
    """``deferred`` events by reason."""
    return dict(Counter(str(e.fields.get("reason", "?")) for e in log if e.kind == "deferred"))


def _returns(log: Sequence[events.Event]) -> dict[str, Any]:
    """From the events (server clock): the waits deferrals handed out, by kind (the reason up
    to its first colon), how late each deferred notice was claimed again after its wait, and
    how many of those returns were deferred again at once."""
    waits: dict[str, list[float]] = {}
    late: dict[str, list[float]] = {}
    due: dict[str, tuple[str, int]] = {}  # job -> (kind, when its deferral ends)
    back: set[str] = set()  # jobs claimed again after a deferral, not settled since
    again = 0
    for e in log:
        if e.kind == "deferred":
            kind = str(e.fields.get("reason", "?")).split(":")[0]
            at = int(e.fields.get("at", e.time_ms))
            waits.setdefault(kind, []).append(at - e.time_ms)
            again += e.subject in back
            back.discard(e.subject)
            due[e.subject] = (kind, at)
        elif e.kind == "claimed" and e.subject in due:
            kind, at = due.pop(e.subject)
            late.setdefault(kind, []).append(e.time_ms - at)
            back.add(e.subject)
        else:
            back.discard(e.subject)
    return {
        "deferred_wait_ms": {k: _summary(v, 0) for k, v in waits.items()},
        "return_lateness_ms": {k: _summary(v, 0) for k, v in late.items()},
        "deferred_again_on_return": again,
    }


def _clock_sample() -> dict[str, float]:
    """``trio.current_time() - time.monotonic()`` (taken back to back) and the same for
    ``time.perf_counter()``."""
    mono = time.monotonic()
    trio_now = trio.current_time()
    perf = time.perf_counter()
    return {"trio_minus_monotonic_s": trio_now - mono, "perf_minus_monotonic_s": perf - mono}


# --- workers -------------------------------------------------------------------------------


@attrs.define
class _Workers:
    ready_at: float = 0.0  # time.monotonic() when consuming began (the first worker ready)
    in_process: NotificationWorker | None = None
    limiter: RateLimiter | None = None


@asynccontextmanager
async def _in_process_workers(bus: Bus, queue: str, tg: TelegramStandIn) -> AsyncIterator[_Workers]:
    async with open_bot(TOKEN, tg.api_url) as bot, trio.open_nursery() as nursery:
        limiter = RateLimiter(bus, LIMITS, tag=queue, margin_ms=_margin(0))
        worker = NotificationWorker(bus, bot, limiter, queue=queue)
        metronome = Metronome(bus, queue, beat_ms=METRONOME_BEAT_MS)
        await nursery.start(worker.run)
        await nursery.start(metronome.run)
        yield _Workers(time.monotonic(), worker, limiter)
        nursery.cancel_scope.cancel()


async def _read_line(proc: trio.Process) -> str:
    assert proc.stdout is not None
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = await proc.stdout.receive_some(1)
        if not chunk:
            raise RuntimeError(f"worker process ended before a line (code {proc.returncode})")
        buf += chunk
    return buf.decode().strip()


async def _stop(procs: Sequence[trio.Process]) -> None:
    """SIGTERM every process still running, then SIGKILL any left after ``STOP_LIMIT_S``."""
    with trio.CancelScope(shield=True):
        for proc in procs:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)  # a clean stop: its notices go back
        with trio.move_on_after(STOP_LIMIT_S):
            for proc in procs:
                await proc.wait()
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
        with trio.move_on_after(STOP_LIMIT_S):
            for proc in procs:
                await proc.wait()


@asynccontextmanager
async def _worker_processes(
    server_url: str, queue: str, tg: TelegramStandIn, count: int
) -> AsyncIterator[_Workers]:
    path = os.pathsep.join(p for p in (REPO_ROOT, os.environ.get("PYTHONPATH")) if p)
    # The server's URL (with its password) and the token go through the environment.
    env = {**os.environ, "PYTHONPATH": path, "ECHOMQ_URL": server_url,
           "CODEMOJEX_TELEGRAM_TOKEN": TOKEN}  # fmt: skip
    argv = [sys.executable, "-m", WORKER_MODULE, "--queue", queue, "--telegram-api-url",
            tg.api_url, "--margin-ms", str(_margin(count)), "--beat-ms",
            str(METRONOME_BEAT_MS)]  # fmt: skip
    procs: list[trio.Process] = []
    try:
        for _ in range(count):
            procs.append(
                await trio.lowlevel.open_process(
                    argv,
                    cwd=REPO_ROOT,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                )
            )
        ready: list[float] = []

        async def wait_ready(proc: trio.Process) -> None:
            line = await _read_line(proc)
            if line != "ready":
                raise RuntimeError(f"worker process said {line!r}, not 'ready'")
            ready.append(time.monotonic())

        with trio.fail_after(READY_LIMIT_S):
            async with trio.open_nursery() as nursery:
                for proc in procs:
                    nursery.start_soon(wait_ready, proc)
        # The first process to be ready starts consuming at once: the run starts then.
        yield _Workers(min(ready))
    finally:
        await _stop(procs)


def _statistics(workers: _Workers) -> dict[str, Any]:
    """The in-process worker's and limiter's ``statistics()`` (none for worker processes)."""
    out: dict[str, Any] = {}
    if workers.in_process is not None:
        out["worker"] = attrs.asdict(workers.in_process.statistics())
    if workers.limiter is not None:
        out["limiter"] = attrs.asdict(workers.limiter.statistics())
    return out


def _workers(
    bus: Bus, server_url: str, queue: str, tg: TelegramStandIn, processes: int
) -> AbstractAsyncContextManager[_Workers]:
    if processes:
        return _worker_processes(server_url, queue, tg, processes)
    return _in_process_workers(bus, queue, tg)


# --- phase 1: saturation -------------------------------------------------------------------


@attrs.frozen
class _Sample:
    free: int  # sends the global window would allow right now
    waiting: int  # lanes waiting until a time (rate-limit deferrals)
    reserved: int  # global slots reserved ahead for waiting chats


async def _sample_limiter(bus: Bus, queue: str, margin_ms: int, out: list[_Sample]) -> None:
    """Every ``SAMPLE_S``: free slots in the global window (entries newer than the window plus
    margin, on the server clock; reserved ones count as used), lanes waiting, slots reserved."""
    window = RateLimiter(bus, LIMITS, tag=queue).global_window
    waits = bus.keys(queue).lane_waits
    span = LIMITS.global_.window_ms + margin_ms
    while True:
        now = await bus.transport.server_time_ms()
        used = await bus.transport.command("ZCOUNT", window, f"({now - span}", "+inf")
        waiting = await bus.transport.command("ZCARD", waits)
        ahead = await bus.transport.command("ZCOUNT", window, f"({now}", "+inf")
        free = max(0, LIMITS.global_.limit - int(used))
        out.append(_Sample(free, int(waiting), int(ahead)))
        await trio.sleep(SAMPLE_S)


def _sample_report(samples: Sequence[_Sample]) -> dict[str, Any]:
    """How often the window had room while lanes were waiting, and the most slots reserved."""
    idle = [s for s in samples if s.free > 0 and s.waiting > 0]
    return {
        "samples": len(samples),
        "free_while_lanes_waited_pct": _round(100 * len(idle) / max(1, len(samples))),
        "mean_free_slots_then": _round(sum(s.free for s in idle) / max(1, len(idle)), 1),
        "max_lanes_waiting": max((s.waiting for s in samples), default=0),
        "max_reserved_ahead": max((s.reserved for s in samples), default=0),
    }


def _in_order(deliveries: Sequence[Delivery], expected: dict[int, list[str]]) -> bool:
    got: dict[int, list[str]] = {}
    for d in deliveries:
        got.setdefault(d.chat_id, []).append(d.text)
    return all(got.get(chat, []) == texts for chat, texts in expected.items())


async def _settle(bus: Bus, queue: str) -> bool:
    """Wait (up to ``SETTLE_LIMIT_S``) until no job of ``queue`` is pending, scheduled or
    active, so that the last acks are in before the workers stop; ``True`` if so."""
    with trio.move_on_after(SETTLE_LIMIT_S):
        while True:
            c = await jobs.counts(bus, queue)
            if c.pending == c.scheduled == c.active == 0:
                return True
            await trio.sleep(0.05)
    return False


async def bench_saturation(
    bus: Bus,
    server_url: str,
    queue: str,
    chats: int,
    processes: int,
    limit_s: float,
    archive_dir: Path | None = None,
) -> dict[str, Any]:
    limit = LIMITS.global_.limit
    window_s = LIMITS.global_.window_s
    chat_ids = [FIRST_CHAT + c for c in range(chats)]
    expected: dict[int, list[str]] = {chat: [] for chat in chat_ids}
    total = chats * NOTICES_PER_CHAT
    async with (
        open_stand_in(TOKEN, LIMITS, keep=total) as tg,  # every delivery's record kept
        trio.open_nursery() as archive_nursery,
    ):
        archiver = None
        if archive_dir is not None:
            # The audit is on before anything is enqueued, so every notice gets its record.
            archiver = Archiver(bus, archive_dir / "audit.sqlite",
                                DirectoryReplica(archive_dir / "replica"), queue=queue)  # fmt: skip
            await archive_nursery.start(archiver.run)
        began = time.monotonic()
        for n in range(NOTICES_PER_CHAT):
            for chat in chat_ids:
                text = f"{chat}:{n}"
                await notify(bus, chat, text, queue=queue)
                expected[chat].append(text)
        enqueue_s = time.monotonic() - began
        complete = False
        samples: list[_Sample] = []
        async with _workers(bus, server_url, queue, tg, processes) as workers:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_sample_limiter, bus, queue, _margin(processes), samples)
                with trio.move_on_after(limit_s):
                    await tg.wait_deliveries(total)
                    complete = True
                nursery.cancel_scope.cancel()
            settled = complete and await _settle(bus, queue)
            in_process = _statistics(workers)
        deliveries = sorted(tg.deliveries, key=lambda d: d.at)
        rate_limited = tg.rate_limited
        requests = tg.statistics().requests
        archived = None
        if archiver is not None:
            with trio.move_on_after(20):
                while archiver.statistics().folder.archived < total:  # noqa: ASYNC110
                    await trio.sleep(0.05)
            stats = archiver.statistics()
            archived = {"rows": stats.folder.archived, "segments": stats.replicator.segments,
                        "fenced": stats.replicator.fenced}  # fmt: skip
        archive_nursery.cancel_scope.cancel()
    times = [d.at for d in deliveries]
    if len(times) <= limit:
        raise RuntimeError(f"only {len(times)} notices arrived in {limit_s:.0f}s")
    gaps = [times[i] - times[i - limit] for i in range(limit, len(times))]
    mean_gap = sum(gaps) / len(gaps)
    steady = limit / mean_gap
    by_chat: dict[int, list[float]] = {}
    for d in deliveries:
        by_chat.setdefault(d.chat_id, []).append(d.at)
    counts = await jobs.counts(bus, queue)
    log = await _events(bus, queue)
    details: dict[str, Any] = {
        "chats": chats,
        "notices": total,
        "delivered": len(deliveries),
        "complete": complete,
        "enqueue_s": _round(enqueue_s, 2),
        "first_arrival_after_ready_ms": _round((times[0] - workers.ready_at) * 1000),
        "run_s": _round(times[-1] - workers.ready_at, 2),
        "after_first_window_sends_per_s": _round(
            (len(times) - limit) / (times[-1] - times[limit - 1]), 2
        ),
        "first_to_last_sends_per_s": _round((len(times) - 1) / (times[-1] - times[0]), 2),
        "last_window_span_s": _round(times[-1] - times[-limit], 2),
        "sends_in_trailing_1s": _trailing_counts(times, workers.ready_at, window_s),
        "cycle_excess_ms": _summary([(g - window_s) * 1000 for g in gaps], 1),
        "limiter_state": _sample_report(samples),
        "margin_ceiling_fraction": _round(1000 / (1000 + _margin(processes)), 4),
        "in_order": _in_order(deliveries, expected),
        "stand_in_requests": requests,
        "deferred_total": counts.deferred_total,
        "deferrals": _deferrals(log),
        "returns": _returns(log),
        "settled": settled,
        "dead": counts.dead,
        **in_process,
    }
    if archived is not None:
        details["archiver"] = archived
    return {
        "saturation_sends_per_s": _round(steady, 2),
        "budget_per_s": LIMITS.global_.per_second,
        "fraction_of_budget": _round(steady / LIMITS.global_.per_second, 4),
        "whole_run_sends_per_s": _round(len(times) / (times[-1] - workers.ready_at), 2),
        "max_in_any_1s_window": most_in_span(times, 1.0),
        "stand_in_429s": rate_limited,
        "per_chat_max_in_1s": max(most_in_span(t, 1.0) for t in by_chat.values()),
        "per_chat_max_in_3s": max(most_in_span(t, 3.0) for t in by_chat.values()),
        "details": details,
    }


def _trailing_counts(times: Sequence[float], start: float, window_s: float) -> dict[str, Any]:
    """The budget over time: every ``TRAILING_STEP_S`` from ``start`` (the workers ready) to the
    last arrival, how many arrivals fell in the ``window_s`` before it (Telegram's bound is
    ``LIMITS.global_.limit`` in any such window)."""
    counts: list[int] = []
    first = 0  # the first arrival inside the window ending at `at`
    last = 0  # the first arrival after `at`
    steps = int((times[-1] - start) / TRAILING_STEP_S) + 1
    for i in range(1, steps + 1):
        at = start + i * TRAILING_STEP_S
        while last < len(times) and times[last] <= at:
            last += 1
        while first < last and times[first] <= at - window_s:
            first += 1
        counts.append(last - first)
    return {"step_s": TRAILING_STEP_S, "window_s": window_s, "counts": counts}


TRAILING_STEP_S = 0.1
_MARGIN_MS = [DEFAULT_MARGIN_MS]  # --margin-ms, set once by main


def _margin(processes: int) -> int:
    return _MARGIN_MS[0]  # worker processes get the same margin (--margin-ms)


# --- phase 2: flood fairness ---------------------------------------------------------------


async def bench_flood(bus: Bus, server_url: str, queue: str, processes: int) -> dict[str, Any]:
    bound_s = SMALL_CHATS / LIMITS.global_.per_second
    small = [FIRST_SMALL_CHAT + c for c in range(SMALL_CHATS)]
    sent_at: dict[int, float] = {}
    # Every delivery's record kept: the flood is stopped long before 1,000 arrive.
    async with open_stand_in(TOKEN, LIMITS, keep=FLOOD_NOTICES + SMALL_CHATS) as tg:
        began = time.monotonic()
        for n in range(FLOOD_NOTICES):
            await notify(bus, FLOOD_CHAT, f"flood {n}", queue=queue)
        enqueue_s = time.monotonic() - began
        async with _workers(bus, server_url, queue, tg, processes) as workers:
            with trio.fail_after(FLOWING_LIMIT_S):
                await tg.wait_deliveries(FLOWING_AFTER, FLOOD_CHAT)
            small_began = time.monotonic()
            for chat in small:
                await notify(bus, chat, "hello", queue=queue)
                sent_at[chat] = time.monotonic()
            small_enqueue_s = time.monotonic() - small_began
            with trio.move_on_after(SMALL_LIMIT_S):
                while sum(tg.delivered(chat) for chat in small) < SMALL_CHATS:
                    await tg.wait_deliveries(tg.delivered() + 1)
            ready_at = workers.ready_at
            in_process = _statistics(workers)
        # The flood is cancelled here, with most of it still queued.
        deliveries = sorted(tg.deliveries, key=lambda d: d.at)
        rate_limited = tg.rate_limited
    small_arrivals = {d.chat_id: d.at for d in deliveries if d.chat_id in sent_at}
    # A small notice that never arrived (only if SMALL_LIMIT_S passed) counts as infinitely late.
    delays = [(small_arrivals[c] - sent_at[c]) * 1000 if c in small_arrivals else math.inf
              for c in small]  # fmt: skip
    last_small = max(small_arrivals.values(), default=math.inf)
    flood_times = [d.at for d in deliveries if d.chat_id == FLOOD_CHAT]
    flood_by_last = sum(1 for t in flood_times if t <= last_small)
    delay = _summary(delays, 1)
    details: dict[str, Any] = {
        "flood_notices": FLOOD_NOTICES,
        "small_chats": SMALL_CHATS,
        "small_arrived": len(small_arrivals),
        "enqueue_flood_s": _round(enqueue_s, 2),
        "small_enqueue_ms": _round(small_enqueue_s * 1000, 1),
        "first_small_sent_after_ready_ms": _round((small_began - ready_at) * 1000),
        "last_small_after_first_sent_ms": _finite((last_small - small_began) * 1000),
        "small_delay_ms": delay,
        "flood_max_in_3s": most_in_span(flood_times, 3.0),
        "max_in_any_1s_window": most_in_span([d.at for d in deliveries], 1.0),
        "stand_in_429s": rate_limited,
        "returns": _returns(await _events(bus, queue)),
        **in_process,
    }
    return {
        "flood_small_delay_ms": {k: delay[k] for k in ("p50", "p99", "max", "count")},
        "flood_expected_bound_ms": _round(bound_s * 1000),
        "flood_arrived_by_last_small": flood_by_last,
        "details": details,
    }


# --- the benchmark -------------------------------------------------------------------------


async def bench(
    url: str | None, quick: bool, processes: int, with_archiver: bool = False
) -> dict[str, Any]:
    began = time.monotonic()
    clock_start = _clock_sample()
    run_id = uuid.uuid4().hex[:8]
    out: dict[str, Any] = {
        "python": platform.python_version(),
        "trio": trio.__version__,
        "cpu_count": os.cpu_count(),
        "quick": quick,
        "workers": f"{processes} processes" if processes else "in-process",
        "limits": {
            "global": attrs.asdict(LIMITS.global_),
            "private": attrs.asdict(LIMITS.private),
            "group": attrs.asdict(LIMITS.group),
        },
        "limiter_margin_ms": _margin(processes),
    }
    details: dict[str, Any] = {}
    async with open_bus(url) as bus:
        server_url = bus.server.url if bus.server is not None else str(url)
        out["server"] = "url" if bus.server is None else "embedded"
        out["server_version"] = await server_version(bus)
        queues = [f"bench-notify-{run_id}-sat", f"bench-notify-{run_id}-flood",
                  f"bench-notify-{run_id}-archived"]  # fmt: skip
        try:
            chats = QUICK_CHATS if quick else CHATS
            limit_s = QUICK_SATURATION_LIMIT_S if quick else SATURATION_LIMIT_S
            sat = await bench_saturation(bus, server_url, queues[0], chats, processes, limit_s)
            details["saturation"] = sat.pop("details")
            out.update(sat)
            flood = await bench_flood(bus, server_url, queues[1], processes)
            details["flood"] = flood.pop("details")
            out.update(flood)
            if with_archiver:
                with tempfile.TemporaryDirectory(prefix="bench-archive-") as folder:
                    arch = await bench_saturation(bus, server_url, queues[2], chats, processes,
                                                  limit_s, Path(folder))  # fmt: skip
                details["saturation_with_archiver"] = arch.pop("details")
                out["with_archiver"] = {
                    "saturation_sends_per_s": arch["saturation_sends_per_s"],
                    "fraction_of_budget": arch["fraction_of_budget"],
                    "vs_without": _round(
                        arch["saturation_sends_per_s"] / out["saturation_sends_per_s"], 4
                    ),
                    "stand_in_429s": arch["stand_in_429s"],
                    "archived": details["saturation_with_archiver"]["archiver"],
                }
        finally:
            if bus.server is None:  # a server we do not own: leave it as we found it
                with trio.move_on_after(10, shield=True):
                    for queue in queues:
                        await drop_queue(bus, queue)
    clock_end = _clock_sample()
    details["clock"] = {
        "trio_minus_monotonic_s": _round(clock_start["trio_minus_monotonic_s"], 6),
        "drift_during_run_us": _round(
            (clock_end["trio_minus_monotonic_s"] - clock_start["trio_minus_monotonic_s"]) * 1e6,
            1,
        ),
        "perf_minus_monotonic_us": _round(clock_end["perf_minus_monotonic_s"] * 1e6, 1),
        "monotonic": time.get_clock_info("monotonic").implementation,
        "perf_counter": time.get_clock_info("perf_counter").implementation,
    }
    out["goals"] = {
        "fraction_of_budget_ge_0.985": out["fraction_of_budget"] >= GOAL_FRACTION,
        "never_above_30_in_1s": out["max_in_any_1s_window"] <= LIMITS.global_.limit
        and details["flood"]["max_in_any_1s_window"] <= LIMITS.global_.limit,
        "no_429s": out["stand_in_429s"] == 0 and details["flood"]["stand_in_429s"] == 0,
        "per_chat_le_3_in_3s": out["per_chat_max_in_3s"] <= LIMITS.private.limit,
        "small_p99_within_bound": _le(
            out["flood_small_delay_ms"]["p99"], out["flood_expected_bound_ms"]
        ),
        "all_delivered_in_order": details["saturation"]["complete"]
        and details["saturation"]["in_order"],
    }
    if with_archiver:
        out["goals"]["archiver_ge_0.95_of_without"] = out["with_archiver"]["vs_without"] >= 0.95
    out["details"] = details
    out["total_s"] = _round(time.monotonic() - began, 1)
    return out


async def _main(url: str | None, quick: bool, processes: int, with_archiver: bool) -> None:
    limit = QUICK_HARD_LIMIT_S if quick else HARD_LIMIT_S
    with trio.fail_after(limit * (2 if with_archiver else 1)):
        result = await bench(url, quick, processes, with_archiver)
    print(json.dumps(result, indent=2), flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--url", help="server URL; default: start an embedded server")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_CHATS} chats, not {CHATS}")
    parser.add_argument(
        "--workers",
        type=int,
        default=0,
        metavar="N",
        help=f"run N worker processes ({WORKER_MODULE}); default: one worker in this process",
    )
    parser.add_argument(
        "--archiver",
        action="store_true",
        help="also run the saturation phase with the audit archiver running, and compare",
    )
    parser.add_argument(
        "--margin-ms",
        type=int,
        default=DEFAULT_MARGIN_MS,
        help="the limiter's margin in every worker (default: %(default)s, the default margin)",
    )
    args = parser.parse_args(argv)
    _MARGIN_MS[0] = args.margin_ms
    if args.workers < 0:
        parser.error("--workers must be >= 0")
    trio.run(_main, args.url, args.quick, args.workers, args.archiver)


if __name__ == "__main__":
    main()
