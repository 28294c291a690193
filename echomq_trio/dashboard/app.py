"""The dashboard's server side: a sampler task and an ASGI app (served by hypercorn on trio,
``servicekit.asgi``).

The sampler lists the server's queues (``queues.queue_names``, a SCAN, every ``names_every_s``)
and reads each one's counts every ``sample_s`` into a ``view.History``; every sample wakes the
viewers. The app answers:

* ``GET /``: the page (one static file in the package); ``GET /emoji.ttf``: the emoji font the
  embedding service gave (``emoji_font``: codemojex gives the game's), else 404;
* ``GET /state.json?<query>``: the view (``view.Query``: the queue to detail and the page of each
  list) as JSON; 400 with ``{"error"}`` for a bad query, 503 while the server is unreachable;
* ``GET /events?<query>``: the same view as server-sent events, one after every sample (the
  sampler renders each view asked for once, for every stream that asks it);
* ``POST /replay?queue=Q&job=ID`` and ``POST /discard?queue=Q&job=ID``: replay or delete a dead job;
  ``POST /delete?queue=Q&job=ID``: delete a waiting or scheduled job (``jobs.delete``);
  ``POST /cancel?queue=Q&job=ID``: cancel a job (``jobs.cancel``, by ``dashboard``);
  ``POST /resume?queue=Q&lane=G``: end a lane's pause or wait; ``POST /pause_queue?queue=Q`` and
  ``POST /resume_queue?queue=Q``: pause or resume the whole queue (``queues``). Every request
  that changes state must carry the dashboard's token in the header ``x-echomq-token``
  (compared in constant time); without it the answer is 403 and nothing changes. The token comes
  from the operator (``ECHOMQ_DASHBOARD_TOKEN``) or is made at start-up and printed once; the
  page takes it from its URL's fragment (``#token=...``), which browsers never send to a server.

Memory: ``_streams`` counts the connected event streams by the view they ask for, and
``_views`` holds that view as of the last sample, one per distinct view asked for: both are
bounded by the streams connected now, and a view is dropped when its last stream leaves.

Every list is one page at a time: queues by name after a cursor, lanes through
``lanes.status_page`` (at most ``LANE_PAGE_MAX``), scheduled and dead jobs and recurring
schedules by offset. Cancelling ``serve``/``run`` stops it all.
"""

from __future__ import annotations

import hmac
import json
import logging
import secrets
from collections import Counter
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

import trio

from echomq_trio import flows, jobs, lanes, queues
from echomq_trio._checks import check_group, check_job_id, check_queue
from echomq_trio._one_queue import handle, list_jobs, open_one
from echomq_trio._partition_meta import membership
from echomq_trio.bus import Bus
from echomq_trio.dashboard import view
from echomq_trio.errors import BusError
from echomq_trio.partitions import PartitionedQueue
from echomq_trio.storage import read_storage, storage_note
from servicekit import humane
from servicekit.asgi import Response, answer, serve_app

if TYPE_CHECKING:
    from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, HTTPScope, Scope

__all__ = ["TOKEN_HEADER", "Dashboard", "new_token"]

log = logging.getLogger("echomq_trio.dashboard")

PAGE = (resources.files("echomq_trio.dashboard") / "page.html").read_bytes()
TOKEN_HEADER = b"x-echomq-token"
_JSON = b"application/json"


# Each action runs on the queue as one queue (``_one_queue.open_one``): a partitioned queue's
# job in the partition that holds it, a lane in its partition, a pause on every partition.


async def _replay(pq: PartitionedQueue, job_id: str) -> object:
    return await pq.replay(job_id)


async def _discard(pq: PartitionedQueue, job_id: str) -> object:
    return await pq.discard(job_id)


async def _delete(pq: PartitionedQueue, job_id: str) -> object:
    return await pq.delete(job_id)


async def _resume(pq: PartitionedQueue, group: str) -> str:
    return "resumed" if await pq.resume_lane(group) else "not_held"


async def _pause_queue(pq: PartitionedQueue) -> str:
    return "paused" if await pq.pause() else "already"


async def _resume_queue(pq: PartitionedQueue) -> str:
    return "resumed" if await pq.resume() else "not_paused"


async def _cancel(pq: PartitionedQueue, job_id: str) -> str:
    return str(await pq.cancel(job_id, by="dashboard"))


def _nothing(_: object) -> str:
    return ""


# The state-changing requests: path -> (the parameter naming what to change, its check, the call);
# a request about the whole queue names nothing more ('').
_ACTIONS: dict[str, tuple[str, Callable[[object], str], Callable[..., Awaitable[object]]]] = {
    "/replay": ("job", check_job_id, _replay),
    "/discard": ("job", check_job_id, _discard),
    "/delete": ("job", check_job_id, _delete),
    "/cancel": ("job", check_job_id, _cancel),
    "/resume": ("lane", check_group, _resume),
    "/pause_queue": ("", _nothing, _pause_queue),
    "/resume_queue": ("", _nothing, _resume_queue),
}


def new_token() -> str:
    """A fresh token for the state-changing requests (128 random bits, URL-safe)."""
    return secrets.token_urlsafe(16)


def _fresh(status: int, content_type: bytes, body: bytes) -> Response:
    return Response(status, content_type, body, [(b"cache-control", b"no-store")])


def _json(status: int, value: Any) -> Response:
    return _fresh(status, _JSON, json.dumps(value).encode())


class Dashboard:
    """Serve with ``url = await nursery.start(dashboard.serve, host, port)``, or mount ``app`` in
    another ASGI app and run ``dashboard.run`` (the sampler) beside it."""

    def __init__(
        self,
        bus: Bus,
        token: str,
        *,
        sample_s: float = 5.0,
        keep: int = 60,
        names_every_s: float = 30.0,
        emoji_font: bytes | None = None,
    ) -> None:
        if not token:
            raise ValueError("the dashboard needs a token for its state-changing requests")
        self.bus = bus
        self._token = token.encode()
        self.sample_s = sample_s
        self.names_every_s = names_every_s
        self.emoji_font = emoji_font  # served as emoji.ttf, for payloads' emoji
        self.history = view.History(keep=keep)
        self._names: list[str] = []  # the queues, by name (a partitioned queue's once)
        self._queues: dict[str, PartitionedQueue] = {}  # each as one queue (its partitions)
        # Bounded by the event streams connected now (see the module's docstring).
        self._streams: Counter[view.Query] = Counter()  # what they ask for -> how many ask it
        self._views: dict[view.Query, bytes] = {}  # each of those views, as of the last sample
        self._sampled = trio.Event()  # set after each sample, then replaced
        self._wake = trio.Event()  # an action asks for a sample now

    @property
    def streams(self) -> int:
        """How many event streams are connected now."""
        return sum(self._streams.values())

    # --- the sampler ---------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Sample until cancelled (a server that cannot be reached is tried again next time)."""
        task_status.started()
        listed_at = -float("inf")
        while True:
            try:
                if trio.current_time() - listed_at >= self.names_every_s:
                    self._queues = await self._list()
                    self._names = sorted(self._queues)
                    self.history.retain(self._names)
                    listed_at = trio.current_time()
                await self.sample()
            except BusError as exc:
                log.warning("dashboard: cannot read the server: %s", exc)
            with trio.move_on_after(self.sample_s):
                await self._wake.wait()
            self._wake = trio.Event()

    async def _list(self) -> dict[str, PartitionedQueue]:
        """The server's queues, each partition folded into its queue (``echomq queues`` does
        the same): one ``HMGET`` per queue found."""
        metas = {
            name: await membership(self.bus, name) for name in await queues.queue_names(self.bus)
        }
        names = sorted({meta.of or name for name, meta in metas.items()})
        # a partitioned queue whose partition 0 was not found (yet) is read on its own
        return {name: handle(self.bus, name, metas[name]) if name in metas
                else (await open_one(self.bus, name))[0] for name in names}  # fmt: skip

    async def sample(self) -> None:
        """Read every known queue's counts once (a partitioned queue's partitions', added up),
        render the view each event stream asks for (once for all the streams that ask the
        same) and wake the streams."""
        now = await self.bus.transport.server_time_ms()
        for name in self._names:
            self.history.add(name, now, await self._queues[name].counts())
        self._views = {query: await self._event(query) for query in list(self._streams)}
        self._sampled.set()
        self._sampled = trio.Event()

    # --- the view --------------------------------------------------------------------------

    async def state(self, query: view.Query) -> dict[str, Any]:
        """The view the page renders (``BusError`` when the server cannot be read)."""
        now = await self.bus.transport.server_time_ms()
        names, next_names = view.name_page(self._names, query.queues_after, query.count)
        shown = query.queue or (names[0] if names else "")
        return {
            "now": humane.iso(now),
            # the server's own trouble, for a banner: it refuses writes (storage_note)
            "alert": storage_note(await read_storage(self.bus)),
            "queues": [
                view.queue_row(n, self.history, self.sample_s, self._count(n)) for n in names
            ],
            "queues_next": next_names,
            "queue": await self._detail(shown, query, now) if shown else None,
        }

    def _count(self, name: str) -> int:
        """How many partitions queue ``name`` has (1: a plain queue)."""
        pq = self._queues.get(name)
        return 1 if pq is None else pq.n

    async def _detail(self, queue: str, query: view.Query, now: int) -> dict[str, Any]:
        # a partitioned queue's view is its partitions' merged (PartitionedQueue); a name not
        # listed (a partition's own, or a queue made since) is opened now
        pq = self._queues.get(queue) or (await open_one(self.bus, queue))[0]
        n = query.count
        lane_rows, lanes_next = await self._lanes(pq, query.lanes_after, now, n)
        scheduled = await list_jobs(pq, jobs.JobState.SCHEDULED, query.scheduled, n + 1)
        dead = await list_jobs(pq, jobs.JobState.DEAD, query.dead, n + 1)
        regs = await pq.list_repeats(n + 1, query.repeats)
        control = await queues.control(self.bus, queue)  # partition 0's (pq.pause sets all)
        # Running jobs are read only when the last sample saw some: a view of an idle queue
        # costs no more than before (the list follows the samples, as the counts do).
        latest = self.history.latest(queue)
        running = (
            await list_jobs(pq, jobs.JobState.ACTIVE, query.running, n + 1)
            if latest is not None and latest.active
            else []
        )
        found = await pq.find(query.job) if query.job else None
        one = None if found is None else found[1]
        # its flow (a parent, children) in its partition, read only for a job asked for by id
        flow = await flows.tree(self.bus, found[0], query.job, max_jobs=50) if found else None
        return {
            "name": queue,
            "partitions": list(pq.names),  # a flow's job in any of them is of this queue
            "control": {
                "paused": control.paused,
                "paused_since": humane.at(control.paused_since_ms, now) if control.paused else None,
                "max_active": control.max_active,
            },
            "lanes": {"rows": lane_rows, "next": lanes_next},
            "scheduled": _offset_page(
                [view.job_row(j, now) for j in scheduled], query.scheduled, n
            ),
            "repeats": _offset_page([view.repeat_row(r, now) for r in regs], query.repeats, n),
            "dead": _offset_page([view.job_row(j, now) for j in dead], query.dead, n),
            "running": _offset_page([view.running_row(j, now) for j in running], query.running, n),
            # the job asked for by id: None when it has no row (or none was asked for)
            "job": {
                "id": query.job,
                "found": None if one is None else view.job_view(one, now),
                "flow": view.flow_view(flow),
            }
            if query.job
            else None,
        }

    async def _lanes(
        self, pq: PartitionedQueue, after: str, now: int, count: int
    ) -> tuple[list[dict[str, Any]], str | None]:
        """A page of the queue's lanes from the cursor ``after`` and the next page's cursor:
        a partitioned queue's lanes partition by partition (``view.split_lane_cursor``; each
        row says its partition), a page filled from the next partitions while it has room, a
        plain queue's as ``lanes.status_page`` pages them."""
        rows: list[dict[str, Any]] = []
        i, inner = view.split_lane_cursor(after)
        while i < pq.n and len(rows) < count:
            page = await lanes.status_page(
                self.bus, pq.names[i], inner, min(count - len(rows), lanes.LANE_PAGE_MAX)
            )
            rows += [view.lane_row(x, now) | ({"partition": i} if pq.n > 1 else {})
                     for x in page.lanes]  # fmt: skip
            if page.next is not None:
                inner = page.next
            else:  # this partition's last page: on to the next partition's first
                i, inner = i + 1, ""
        return rows, view.join_lane_cursor(i, inner) if i < pq.n else None

    # --- HTTP ----------------------------------------------------------------------------

    async def app(self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        if scope["type"] == "http" and scope["path"] == "/events":
            await self._events(scope, receive, send)
            return
        await answer(scope, receive, send, self._answer)

    async def _answer(self, scope: HTTPScope, _receive: ASGIReceiveCallable) -> Response:
        path, method = scope["path"], scope["method"]
        if path == "" and scope.get("root_path"):  # mounted, asked without the slash
            where = (scope["root_path"] + "/").encode()
            return Response(308, b"text/plain", b"", [(b"location", where)])
        if path in ("/", "/index.html") and method == "GET":
            return _fresh(200, b"text/html; charset=utf-8", PAGE)
        if path == "/emoji.ttf" and self.emoji_font is not None:
            cache = [(b"cache-control", b"public, max-age=86400")]
            return Response(200, b"font/ttf", self.emoji_font, cache)
        if path == "/state.json" and method == "GET":
            try:
                return _json(200, await self.state(view.parse_query(scope["query_string"])))
            except ValueError as exc:
                return _json(400, {"error": str(exc)})
            except BusError:
                return _json(503, {"error": "the server is unavailable"})
        if path in _ACTIONS:
            if method != "POST":
                return Response(405, b"text/plain", b"POST only", [(b"allow", b"POST")])
            return await self._act(scope, _ACTIONS[path])
        return _fresh(404, b"text/plain", b"not found")

    def authorized(self, scope: HTTPScope) -> bool:
        """Whether the request carries the token (constant-time comparison)."""
        given = [v for k, v in scope["headers"] if k.lower() == TOKEN_HEADER]
        return len(given) == 1 and hmac.compare_digest(given[0], self._token)

    async def _act(
        self,
        scope: HTTPScope,
        action: tuple[str, Callable[[object], str], Callable[..., Awaitable[object]]],
    ) -> Response:
        if not self.authorized(scope):
            return _json(403, {"error": "this needs the dashboard's token (printed at start-up)"})
        parameter, check, call = action
        try:
            given = dict(parse_qsl(scope["query_string"].decode("ascii")))
            queue = check_queue(given.get("queue"))
            subject = check(given.get(parameter))
        except (ValueError, UnicodeDecodeError) as exc:
            return _json(400, {"error": str(exc)})
        try:
            pq = (await open_one(self.bus, queue))[0]
            outcome = await (call(pq, subject) if parameter else call(pq))
        except BusError:
            return _json(503, {"error": "the server is unavailable"})
        self._wake.set()  # sample now: the change shows at once
        return _json(200, {"outcome": str(outcome)})

    async def _events(
        self, scope: HTTPScope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        try:
            query = view.parse_query(scope["query_string"])
        except ValueError as exc:
            body = json.dumps({"error": str(exc)}).encode()
            await send({"type": "http.response.start", "status": 400,
                        "headers": [(b"content-type", _JSON)]})  # fmt: skip
            await send({"type": "http.response.body", "body": body, "more_body": False})
            return
        headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-store")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        self._streams[query] += 1
        try:
            async with trio.open_nursery() as nursery:

                async def until_gone() -> None:
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    nursery.cancel_scope.cancel()

                nursery.start_soon(until_gone)
                while True:
                    sampled, views = self._sampled, self._views
                    event = views.get(query)
                    if event is None:  # the first stream to ask it since the last sample
                        event = views[query] = await self._event(query)
                    await send({"type": "http.response.body", "body": event, "more_body": True})
                    await sampled.wait()
        finally:
            self._streams[query] -= 1
            if not self._streams[query]:
                del self._streams[query]
                self._views.pop(query, None)

    async def _event(self, query: view.Query) -> bytes:
        """The view ``query`` asks for as one server-sent event."""
        try:
            return f"data: {json.dumps(await self.state(query))}\n\n".encode()
        except BusError:
            return b"event: down\ndata: the server is unavailable\n\n"

    async def serve(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Sample and serve on ``host:port`` (loopback by default) until cancelled;
        ``task_status.started`` gets the base URL."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self.run)
            url = await nursery.start(
                serve_app, self.app, host, port, "echomq_trio.dashboard.hypercorn"
            )
            task_status.started(url)


def _offset_page(rows: list[dict[str, Any]], offset: int, count: int) -> dict[str, Any]:
    """A page read with one row more than shown: whether there is a next page."""
    more = len(rows) > count
    return {"rows": rows[:count], "offset": offset, "next": offset + count if more else None}
