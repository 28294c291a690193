"""The dashboard's view model (pure: no I/O, no clock of its own).

``History`` keeps the last samples of each queue's counts (``Counts``, read every
``sample_s`` by the dashboard's sampler), so throughput and retries over the last minutes are
the differences of the running totals between samples. ``Query`` is what a browser asks for:
which queue to detail and which page of each list. The ``*_row`` functions turn the bus's read
results into the JSON the page renders, with times as ISO and "in 3 min"; ``sparkline`` draws a
series as a small inline SVG of numbers only (nothing from the data is spelled into it).
``percent`` reads a job's progress as a share of its work for a bar, when it says one.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import parse_qsl

import attrs

from echomq_trio import cron
from echomq_trio._checks import check_job_id, check_lane_cursor, check_queue
from echomq_trio.flows import FlowTree, outline
from echomq_trio.repeat import next_runs
from echomq_trio.results import Counts, JobInfo, LaneStatus, Registration
from servicekit import humane

__all__ = [
    "DEFAULT_PAGE",
    "History",
    "Query",
    "deltas",
    "flow_view",
    "job_row",
    "job_view",
    "join_lane_cursor",
    "lane_row",
    "name_page",
    "parse_query",
    "percent",
    "queue_row",
    "repeat_row",
    "running_row",
    "sparkline",
    "split_lane_cursor",
]

DEFAULT_PAGE = 20  # rows per list, and queues per page
_OFFSETS = ("scheduled", "repeats", "dead", "running")
_TEXT_SHOWN = 120  # payload characters shown
_PARTITION_CURSOR = re.compile(r"p([1-9][0-9]{0,3})/(.*)", re.DOTALL)  # join_lane_cursor's


@attrs.frozen
class Sample:
    at_ms: int
    counts: Counts


@attrs.define
class History:
    """The last ``keep`` samples of each queue's counts (bounded: ``keep`` per queue, and only
    the queues last seen on the server, see ``retain``)."""

    keep: int = 60
    _samples: dict[str, deque[Sample]] = attrs.field(factory=dict)

    def add(self, queue: str, at_ms: int, counts: Counts) -> None:
        self._samples.setdefault(queue, deque(maxlen=self.keep)).append(Sample(at_ms, counts))

    def retain(self, queues: Iterable[str]) -> None:
        """Forget the queues that are no longer on the server."""
        alive = set(queues)
        for queue in [q for q in self._samples if q not in alive]:
            del self._samples[queue]

    def latest(self, queue: str) -> Counts | None:
        samples = self._samples.get(queue)
        return samples[-1].counts if samples else None

    def totals(self, queue: str, field: str) -> list[int]:
        return [getattr(s.counts, field) for s in self._samples.get(queue, ())]

    def span_ms(self, queue: str) -> int:
        """How long the kept samples cover."""
        samples = self._samples.get(queue)
        return samples[-1].at_ms - samples[0].at_ms if samples and len(samples) > 1 else 0


def deltas(totals: Sequence[int]) -> list[int]:
    """What a running total grew by between samples (a total that fell, after a server lost its
    data, counts as no growth)."""
    return [max(0, b - a) for a, b in itertools.pairwise(totals)]


def sparkline(values: Sequence[int], *, width: int = 120, height: int = 28) -> str:
    """A small SVG chart of ``values`` (oldest first): a line, its area, and nothing but numbers
    from the data, so it is safe to place as markup."""
    points = list(values) or [0]
    if len(points) == 1:
        points = points * 2
    top = max(max(points), 1)
    step = width / (len(points) - 1)
    xy = [(round(i * step, 1), round(height - 1 - v / top * (height - 2), 1))
          for i, v in enumerate(points)]  # fmt: skip
    line = " ".join(f"{x},{y}" for x, y in xy)
    area = f"0,{height} {line} {width},{height}"
    return (
        f'<svg class="spark" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'role="img" aria-label="peak {top}"><polygon points="{area}" class="area"/>'
        f'<polyline points="{line}" class="line" fill="none"/></svg>'
    )


def queue_row(name: str, history: History, sample_s: float, partitions: int = 1) -> dict[str, Any]:
    """One queue's line in the list: its counts now, and throughput and retries per sample
    over the kept minutes (with their charts and per-minute rates); a partitioned queue's
    counts are its partitions' added up, and ``partitions`` says how many it has."""
    c = history.latest(name)
    done = deltas(history.totals(name, "completed_total"))
    retried = deltas(history.totals(name, "retried_total"))
    minutes = history.span_ms(name) / 60_000
    counts = {} if c is None else {
        "pending": c.pending, "scheduled": c.scheduled, "active": c.active,
        "waiting_children": c.waiting_children, "dead": c.dead,
        "lanes": c.lanes, "paused_lanes": c.paused_lanes, "waiting_lanes": c.waiting_lanes,
        "repeats": c.repeats, "completed_total": c.completed_total,
        "retried_total": c.retried_total, "expired_total": c.expired_total,
    }  # fmt: skip
    return {
        "name": name,
        "partitions": partitions,
        "counts": counts,
        "done_per_min": round(sum(done) / minutes, 1) if minutes else 0,
        "retries_per_min": round(sum(retried) / minutes, 1) if minutes else 0,
        "done_chart": sparkline(done),
        "retries_chart": sparkline(retried),
        "window": humane.span(history.span_ms(name)) if minutes else "",
        "sample_s": sample_s,
    }


def job_row(info: JobInfo, now_ms: int) -> dict[str, Any]:
    """A scheduled or dead job: its time (run-at or death) as ISO and relative to now."""
    return {
        "id": info.id,
        "attempts": info.attempts,
        "group": info.group,
        "error": info.last_error or "",
        "when": humane.iso(info.score_ms),
        "relative": humane.relative(info.score_ms, now_ms),
        "payload": humane.payload_text(info.payload, _TEXT_SHOWN),
    }


def percent(progress: object) -> float | None:
    """A job's progress as a percentage for a bar (0-100), when it says one: a number from 0 to
    100, or a mapping with ``percent``, or with ``step``/``done`` of ``of``/``total``; else
    ``None`` (the value is shown as text)."""

    def number(x: object) -> float | None:
        ok = isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
        return float(x) if ok else None  # type: ignore[arg-type]

    share = number(progress)
    if isinstance(progress, Mapping):
        share = number(progress.get("percent"))
        for done, whole in (("step", "of"), ("done", "total")):
            d, w = number(progress.get(done)), number(progress.get(whole))
            if share is None and d is not None and w:
                share = 100 * d / w
    if share is None or not 0 <= share <= 100:
        return None
    return round(share, 1)


def _progress_text(progress: object) -> str:
    return "" if progress is None else humane.payload_text(json.dumps(progress), _TEXT_SHOWN)


def running_row(info: JobInfo, now_ms: int) -> dict[str, Any]:
    """A running job: its lease's end, and its progress (a bar's ``percent`` when it says one,
    and as text)."""
    return {
        "id": info.id,
        "attempts": info.attempts,
        "group": info.group,
        "lease": humane.relative(info.score_ms, now_ms),
        "percent": percent(info.progress),
        "progress": _progress_text(info.progress),
        "payload": humane.payload_text(info.payload, _TEXT_SHOWN),
    }


def job_view(info: JobInfo, now_ms: int) -> dict[str, Any]:
    """One job looked up by id: its state, priority, progress, and a finished job's result or a
    dead one's error; its expiry and debounce key when it has them."""
    return {
        "id": info.id,
        "state": str(info.state),
        "attempts": info.attempts,
        "priority": info.priority,
        "group": info.group,
        "percent": percent(info.progress),
        "progress": _progress_text(info.progress),
        "result": None if info.result is None else humane.payload_text(info.result, _TEXT_SHOWN),
        "finished": "" if info.finished_ms is None else humane.at(info.finished_ms, now_ms),
        "expires": "" if info.expires_ms is None else humane.at(info.expires_ms, now_ms),
        "debounce": info.debounce or "",
        "error": info.last_error or "",
        "payload": humane.payload_text(info.payload, _TEXT_SHOWN),
    }


def flow_view(tree: FlowTree | None) -> dict[str, Any] | None:
    """A job's flow for its view: its parent (queue, id, state) and the tree from it down, a row
    per job with its depth (the job itself first, at 0), its state and what its parent keeps of
    it (result, or an ignored failure); ``None`` for a job in no flow."""
    if tree is None or (tree.parent is None and tree.unfinished is None):
        return None
    parent = None
    if tree.parent is not None:
        queue, job_id = tree.parent
        parent = {"queue": queue, "id": job_id, "state": tree.parent_state or "gone"}
    rows = []
    for depth, node in outline(tree):
        kept = node.error or ("" if node.result is None else
                              humane.payload_text(node.result, _TEXT_SHOWN))  # fmt: skip
        rows.append({"depth": depth, "queue": node.queue, "id": node.id,
                     "state": node.state or "gone", "unfinished": node.unfinished,
                     "kept": kept, "more": node.more})  # fmt: skip
    return {"parent": parent, "rows": rows}


def repeat_row(reg: Registration, now_ms: int) -> dict[str, Any]:
    """A registration: its schedule (``every 1 h``, or the cron expression and its zone), and its
    next 3 runs in the schedule's zone and in UTC."""
    tz = reg.tz or "UTC"
    try:
        runs = [{"local": cron.local_text(t, tz), "utc": humane.iso(t)} for t in next_runs(reg)]
    except ValueError:  # a zone this machine's database lacks
        runs = []
    return {
        "name": reg.name,
        "every": "-" if reg.every_ms is None else humane.span(reg.every_ms),
        "schedule": reg.cron if reg.cron is not None else f"every {humane.span(reg.every_ms or 0)}",
        "zone": reg.tz or "-",
        "next_runs": runs,
        "next": humane.iso(reg.next_run_ms),
        "next_relative": humane.relative(reg.next_run_ms, now_ms),
        "last_fired": humane.relative(reg.last_fired_ms, now_ms),
        "group": reg.group,
        "template": humane.payload_text(reg.template, _TEXT_SHOWN),
    }


def lane_row(lane: LaneStatus, now_ms: int) -> dict[str, Any]:
    """A lane and the one word for its state: paused, waiting (until a time), at its limit,
    served (on the ring), or idle."""
    if lane.paused:
        state = "paused"
    elif lane.wait_until_ms is not None and lane.wait_until_ms > now_ms:
        state = f"waiting until {humane.iso(lane.wait_until_ms)} "
        state += f"({humane.relative(lane.wait_until_ms, now_ms)})"
    elif lane.limit and lane.in_flight >= lane.limit:
        state = "at its limit"
    elif lane.on_ring:
        state = "served"
    else:
        state = "idle"
    return {
        "group": lane.group,
        "depth": lane.depth,
        "in_flight": lane.in_flight,
        "limit": lane.limit,
        "weight": lane.weight,
        "state": state,
        "held": state == "paused" or state.startswith("waiting"),  # resume ends it
    }


def split_lane_cursor(cursor: str) -> tuple[int, str]:
    """A lane page's cursor as the partition it is in and ``lanes.status_page``'s cursor
    there: a partitioned queue's pages go through its partitions in turn, its cursors
    ``p<i>/<cursor>`` beyond partition 0 (``join_lane_cursor``); a plain queue's cursors are
    ``status_page``'s own, in partition 0. ``ValueError`` for anything else."""
    found = _PARTITION_CURSOR.fullmatch(cursor)
    if found:
        return int(found[1]), check_lane_cursor(found[2])
    return 0, check_lane_cursor(cursor)


def join_lane_cursor(partition: int, cursor: str) -> str:
    """The cursor of the lane page at ``cursor`` in partition ``partition``
    (``split_lane_cursor`` reads it back)."""
    return cursor if partition == 0 else f"p{partition}/{cursor}"


def name_page(names: Sequence[str], after: str, count: int) -> tuple[list[str], str | None]:
    """The ``count`` names after the cursor ``after`` (names are sorted; ``""``: from the first),
    and the next page's cursor (``None`` after the last)."""
    start = 0
    if after:
        start = next((i for i, n in enumerate(names) if n > after), len(names))
    page = list(names[start : start + count])
    return page, (page[-1] if start + count < len(names) and page else None)


@attrs.frozen
class Query:
    """What the page asks for: the queue to detail (``""``: the first on the page), and a cursor
    or offset for each paged list."""

    queue: str = ""
    queues_after: str = ""
    lanes_after: str = ""
    scheduled: int = 0
    repeats: int = 0
    dead: int = 0
    count: int = DEFAULT_PAGE
    running: int = 0
    job: str = ""  # a job of the queue to show on its own (its progress, result or error)


def parse_query(query: bytes) -> Query:
    """A ``Query`` from a query string; ``ValueError`` saying what is wrong otherwise."""
    try:
        pairs = parse_qsl(query.decode("ascii"), keep_blank_values=True)
    except UnicodeDecodeError:
        raise ValueError("the query must be ASCII") from None
    given: dict[str, str] = {}
    for name, value in pairs:
        if name in given:
            raise ValueError(f"parameter {name} given twice")
        given[name] = value
    return _query(given)


def _query(given: Mapping[str, str]) -> Query:
    known = {f.name for f in attrs.fields(Query)}
    for name in given:
        if name not in known:
            raise ValueError(f"unknown parameter {name!r}")
    numbers: dict[str, int] = {}
    for name in (*_OFFSETS, "count"):
        if name in given:
            text = given[name]
            if not text.isascii() or not text.isdigit() or len(text) > 9:
                raise ValueError(f"{name} must be a whole number")
            numbers[name] = int(text)
    if "count" in numbers and not 1 <= numbers["count"] <= 100:
        raise ValueError("count must be 1-100")
    queue = given.get("queue", "")
    queues_after = given.get("queues_after", "")
    lanes_after = given.get("lanes_after", "")
    split_lane_cursor(lanes_after)  # a lane page's cursor, of any partition, or ValueError
    return Query(
        queue=check_queue(queue) if queue else "",
        queues_after=check_queue(queues_after) if queues_after else "",
        lanes_after=lanes_after,
        scheduled=numbers.get("scheduled", 0),
        repeats=numbers.get("repeats", 0),
        dead=numbers.get("dead", 0),
        count=numbers.get("count", DEFAULT_PAGE),
        running=numbers.get("running", 0),
        job=check_job_id(given["job"]) if given.get("job") else "",
    )
