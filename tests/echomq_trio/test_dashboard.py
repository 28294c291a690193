"""The bus dashboard in a real headless Chromium over a real server: a queue appears after the
page was opened, its counts change as jobs run, a dead job is replayed from the page and runs,
another is deleted from the page; requests that change state without the token are refused and
change nothing. Over plain HTTP: the state's pages and the refusals of bad queries."""

from __future__ import annotations

from functools import partial
from typing import Any

import httpx
import pytest
import trio

from echomq_trio import Bus, Consumer, Job, ids, jobs, lanes, repeat
from echomq_trio.dashboard import TOKEN_HEADER, Dashboard, view
from servicekit.asgi import serve_app
from tests.support import traced_blocks, tracing, wait_for
from tools.browser import open_page

TOKEN = "dashboard-test-token"


def _dashboard(bus: Bus) -> Dashboard:
    return Dashboard(bus, TOKEN, sample_s=0.2, names_every_s=0.2)


@pytest.mark.slow
@pytest.mark.timeout_s(120)
async def test_dashboard_shows_a_queue_live_and_replays_a_dead_job(bus: Bus, queue: str) -> None:
    queue = "!" + queue  # first by name, so on the first page among the other tests' queues
    fixed = trio.Event()  # after the replay, the failing job succeeds
    ran: list[str] = []

    async def handler(job: Job) -> None:
        if job.text == "bad" and not fixed.is_set():
            raise RuntimeError("the mail server said no")
        ran.append(job.text)

    async with trio.open_nursery() as nursery, httpx.AsyncClient() as client:
        url = await nursery.start(_dashboard(bus).serve, "127.0.0.1", 0)
        async with open_page() as page:
            await page.goto(f"{url}/?x=1#token={TOKEN}")

            async def count(name: str) -> str | None:
                return await page.evaluate(  # type: ignore[no-any-return]
                    f'(document.querySelector(\'tr[data-queue="{queue}"] '
                    f'td[data-count="{name}"]\') || {{}}).textContent || null'
                )

            async def shows(name: str, value: str) -> bool:
                return await count(name) == value

            assert await count("pending") is None  # the queue does not exist yet
            bad = ids.generate("JOB")
            await jobs.enqueue_many(bus, queue, [(ids.generate("JOB"), "ok"), (bad, "bad")])
            await jobs.enqueue_in(bus, queue, "later", 3_600_000, job_id=ids.generate("JOB"))
            await wait_for(partial(shows, "pending", "2"), timeout=30, step=0.1)
            await page.evaluate(f"document.querySelector('tr[data-queue=\"{queue}\"] a').click()")
            later = "document.querySelector('#scheduled').innerText"
            await wait_for(lambda: _contains(page, later, "in 59 min"), timeout=30, step=0.1)

            workers = trio.CancelScope()
            consumer = Consumer(bus, queue, handler, max_attempts=1)
            nursery.start_soon(_run_in, workers, consumer)
            await wait_for(partial(shows, "dead", "1"), timeout=30, step=0.1)
            assert await count("pending") == "0" and ran == ["ok"]
            dead = "document.querySelector('#dead').innerText"
            await wait_for(lambda: _contains(page, dead, "the mail server said no"), timeout=30,
                           step=0.1)  # fmt: skip

            # Without the token, or with a wrong one, nothing changes.
            for headers in ({}, {TOKEN_HEADER.decode(): "wrong"}):
                refused = await client.post(f"{url}/replay?queue={queue}&job={bad}",
                                            headers=headers)  # fmt: skip
                assert refused.status_code == 403, refused.text
            assert (await client.get(f"{url}/replay?queue={queue}&job={bad}")).status_code == 405
            assert (await jobs.get_job(bus, queue, bad)).state == "dead"  # type: ignore[union-attr]

            fixed.set()
            await page.evaluate(f"document.querySelector('tr[data-job=\"{bad}\"] .replay').click()")
            await wait_for(lambda: "bad" in ran, timeout=30, step=0.1)
            await wait_for(partial(shows, "dead", "0"), timeout=30, step=0.1)
            flash = "document.querySelector('#flash').textContent"
            # The flash follows the replay's answer; the count may follow a sample first.
            await wait_for(lambda: _contains(page, flash, f"{bad}: replayed"), timeout=30, step=0.1)
            assert await page.evaluate(flash) == f"{bad}: replayed"
            workers.cancel()  # no consumer from here on: the next job stays where it is put

            # A page without the token is refused by the server, and says so.
            await page.evaluate("document.querySelector('#token').value = ''")
            gone = ids.generate("JOB")
            await jobs.enqueue(bus, queue, "doomed", job_id=gone)
            await _bury(bus, queue, gone)
            await wait_for(partial(shows, "dead", "1"), timeout=30, step=0.1)
            await wait_for(lambda: _contains(page, dead, gone), timeout=30, step=0.1)
            await page.evaluate("window.confirm = () => true")
            await page.evaluate(
                f"document.querySelector('tr[data-job=\"{gone}\"] .discard').click()"
            )
            await wait_for(lambda: _contains(page, flash, "refused"), timeout=30, step=0.1)
            assert (await jobs.get_job(bus, queue, gone)).state == "dead"  # type: ignore[union-attr]
            await page.evaluate(f"document.querySelector('#token').value = '{TOKEN}'")
            await page.evaluate(
                f"document.querySelector('tr[data-job=\"{gone}\"] .discard').click()"
            )
            await wait_for(partial(shows, "dead", "0"), timeout=30, step=0.1)
            assert await jobs.get_job(bus, queue, gone) is None
        nursery.cancel_scope.cancel()


async def _run_in(scope: trio.CancelScope, consumer: Consumer) -> None:
    with scope:
        await consumer.run()


async def _contains(page: object, expression: str, text: str) -> bool:
    return text in str(await page.evaluate(expression))  # type: ignore[attr-defined]


async def _bury(bus: Bus, queue: str, job_id: str) -> None:
    """Claim ``job_id`` (the only pending job) and bury it."""
    (job,) = await jobs.claim(bus, queue)
    assert job.id == job_id
    await jobs.retry(bus, queue, job.id, job.token, 0, 1, "no such chat", buried=True)


async def test_state_json_pages_every_list_and_refuses_bad_requests(bus: Bus, queue: str) -> None:
    for i in range(5):
        await lanes.enqueue(bus, queue, f"chat{i}", f"lane {i}", job_id=ids.generate("JOB"))
    for i in range(3):
        await repeat.register(bus, queue, f"digest{i}", 86_400_000, b"{}", first_in_ms=60_000 * i)
    dashboard = _dashboard(bus)
    async with trio.open_nursery() as nursery, httpx.AsyncClient() as client:
        url = await nursery.start(dashboard.serve, "127.0.0.1", 0)
        groups: list[str] = []
        query = f"queue={queue}&count=2"
        while True:
            state = (await client.get(f"{url}/state.json?{query}")).json()
            detail = state["queue"]
            groups += [row["group"] for row in detail["lanes"]["rows"]]
            if detail["lanes"]["next"] is None:
                break
            query = f"queue={queue}&count=2&lanes_after={detail['lanes']['next']}"
        assert groups == [f"chat{i}" for i in range(5)]
        repeats = detail["repeats"]
        assert [r["name"] for r in repeats["rows"]] == ["digest0", "digest1"]
        assert repeats["next"] == 2 and repeats["rows"][0]["every"] == "1 d"
        last = (await client.get(f"{url}/state.json?queue={queue}&count=2&repeats=2")).json()
        assert [r["name"] for r in last["queue"]["repeats"]["rows"]] == ["digest2"]
        assert last["queue"]["repeats"]["next"] is None
        assert last["queue"]["repeats"]["rows"][0]["next_relative"].startswith("in 1 min")

        async def listed() -> bool:
            # Every page of names (the test server holds every test's queues, often over 100).
            after = ""
            while True:
                page = (await client.get(f"{url}/state.json?count=100&queues_after={after}")).json()
                if queue in [q["name"] for q in page["queues"]]:
                    return True
                if not page["queues_next"]:
                    return False
                after = page["queues_next"]

        await wait_for(listed, timeout=30, step=0.1)
        for bad in ("count=0", "dead=x", "nope=1", "queue=a%20b"):
            reply = await client.get(f"{url}/state.json?{bad}")
            assert reply.status_code == 400 and set(reply.json()) == {"error"}, bad
            assert (await client.get(f"{url}/events?{bad}")).status_code == 400
        headers = {TOKEN_HEADER.decode(): TOKEN}
        reply = await client.post(f"{url}/replay?queue={queue}&job=nope", headers=headers)
        assert reply.status_code == 400
        reply = await client.post(f"{url}/discard?queue={queue}&job={ids.generate('JOB')}",
                                  headers=headers)  # fmt: skip
        assert reply.json() == {"outcome": "gone"}
        # A cancel, with the token only: the job is cancelled by the dashboard.
        later = await jobs.enqueue_in(bus, queue, "later", 60_000)
        cancel = f"{url}/cancel?queue={queue}&job={later.id}"
        assert (await client.post(cancel)).status_code == 403
        assert (await client.post(cancel, headers=headers)).json() == {"outcome": "cancelled"}
        assert (await client.post(cancel, headers=headers)).json() == {"outcome": "already_done"}
        info = await jobs.get_job(bus, queue, later.id)
        assert info is not None and info.last_error == "cancelled by dashboard"
        assert (await client.get(f"{url}/nothing")).status_code == 404
        await lanes.pause(bus, queue, "chat3")
        paused = (await client.get(f"{url}/state.json?queue={queue}")).json()["queue"]["lanes"]
        assert [(r["group"], r["state"], r["held"]) for r in paused["rows"] if r["held"]] == [
            ("chat3", "paused", True)
        ]
        resume = f"{url}/resume?queue={queue}&lane=chat3"
        assert (await client.post(resume)).status_code == 403
        assert (await lanes.status(bus, queue, ["chat3"]))[0].paused
        assert (await client.post(resume, headers=headers)).json() == {"outcome": "resumed"}
        assert not (await lanes.status(bus, queue, ["chat3"]))[0].paused
        assert (await client.post(resume, headers=headers)).json() == {"outcome": "not_held"}
        async with client.stream("GET", f"{url}/events?queue={queue}") as events:
            assert events.headers["content-type"] == "text/event-stream"
            async for line in events.aiter_lines():
                if line.startswith("data: "):
                    assert '"name": "' + queue in line
                    break
        nursery.cancel_scope.cancel()


class Counting(Dashboard):
    """A dashboard that counts the views it renders."""

    renders = 0

    async def state(self, query: view.Query) -> dict[str, Any]:
        self.renders += 1
        return await super().state(query)


@pytest.mark.timeout_s(240)
async def test_event_streams_share_each_view_and_leave_nothing_behind(bus: Bus, queue: str) -> None:
    """60 event streams asking two views: each sample renders each view once, for every stream
    that asks it; when they have gone the dashboard keeps nothing of them, and of the Python
    memory blocks its code allocated for them none is left."""
    await jobs.enqueue(bus, queue, "x")
    dash = Counting(bus, TOKEN, sample_s=3600, names_every_s=3600)  # it samples when told to
    app_code = "echomq_trio/dashboard/app.py"
    asked = [f"queue={queue}", f"queue={queue}&count=5"]
    limits = httpx.Limits(max_connections=None)

    async def stream(client: httpx.AsyncClient, url: str, events: list[int]) -> None:
        async with client.stream("GET", url) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    events[0] += 1

    async def crowd(url: str, n: int) -> int:
        events = [0]
        # Tracing makes every allocation slow: on a loaded machine a stream's first answer can
        # take longer than httpx's 5 s default, so the test's own deadline is the only one.
        async with (
            httpx.AsyncClient(limits=limits, timeout=None) as client,
            trio.open_nursery() as streams,
        ):
            for i in range(n):
                streams.start_soon(stream, client, f"{url}/events?{asked[i % 2]}", events)
            await wait_for(lambda: events[0] == n, timeout=60)  # each has its first view
            assert (dash.streams, len(dash._streams)) == (n, 2)
            renders = dash.renders
            await dash.sample()
            await wait_for(lambda: events[0] == 2 * n, timeout=60)  # and the sample's
            assert dash.renders == renders + 2  # once per view asked, not per stream
            held = traced_blocks(app_code)
            streams.cancel_scope.cancel()
        await wait_for(lambda: dash.streams == 0, timeout=60)
        return held

    async with trio.open_nursery() as nursery:
        url = await nursery.start(serve_app, dash.app, "127.0.0.1", 0, "test.dashboard")
        with tracing():
            await crowd(url, 6)  # what a first crowd makes once (containers grown)
            before = traced_blocks(app_code)
            held = await crowd(url, 60)
            await wait_for(lambda: traced_blocks(app_code) <= before + 20, timeout=60, step=0.5)
        assert held >= before + 5 * 60  # what 60 streams hold while connected
        assert (dash._streams, dash._views) == ({}, {})
        nursery.cancel_scope.cancel()


async def test_a_dashboard_needs_a_token(bus: Bus) -> None:
    with pytest.raises(ValueError, match="token"):
        Dashboard(bus, "")
