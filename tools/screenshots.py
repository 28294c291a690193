"""Regenerate the screenshots in docs/: the bus dashboard and the leaderboard page, each a real
capture of headless Chromium (Debian's ``chromium``) driven over the DevTools protocol (the same
helper as the page tests, ``tools/browser.py``).

    python3 -m tools.screenshots [--out docs] [--only {app,site}]

It starts an embedded server in a temporary directory, fills a few queues (jobs that run, fail
and are retried, lanes, a paused lane, scheduled and recurring jobs, dead jobs) and a game room
with a round in play, serves the dashboard and the leaderboard page on loopback, and captures
each at a desktop width (``docs/dashboard.png``, ``docs/leaderboard.png``) and the leaderboard at
a phone's (``docs/leaderboard-phone.png``). Run it from the repository root.

The docs site too (``--only site`` alone): it builds the site (``python3 -m sphinx``, as
``just docs`` does) into a temporary folder and captures its landing page
(``docs/site-landing.png``) and the benchmarks page (``docs/site-benchmarks.png``) from the
built files.
"""

from __future__ import annotations

import argparse
import base64
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import trio

from codemojex import game
from codemojex.game import Feed, PageServer, board
from codemojex.game.page import EMOJI_FONT
from echomq_trio import (
    Bus,
    Consumer,
    Job,
    Metronome,
    RetryIn,
    ids,
    jobs,
    lanes,
    open_bus,
    queues,
    repeat,
)
from echomq_trio.dashboard import Dashboard, new_token
from tools.browser import Page, open_page

DAY_MS = 86_400_000


async def capture(page: Page, path: Path, width: int, height: int, mobile: bool = False) -> None:
    await page.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                    deviceScaleFactor=1, mobile=mobile)  # fmt: skip
    shot = await page.call("Page.captureScreenshot", format="png")
    data = base64.b64decode(shot["data"])
    await trio.Path(path).write_bytes(data)
    print(f"wrote {path} ({len(data) // 1024} KiB)")


async def fill_bus(bus: Bus, nursery: trio.Nursery) -> None:
    """Queues with something in every list, and consumers and a producer that keep jobs moving.
    ``cm.notify`` has it all: lanes (one paused, one waiting), scheduled reminders, recurring
    schedules and dead notices."""
    rng = random.Random(7)
    q = "cm.notify"
    for reason in ("Forbidden: bot was blocked by the user", "Bad Request: chat not found"):
        job_id = ids.generate("JOB")
        await jobs.enqueue(bus, q, '{"chat": -1009, "text": "🏆 results"}', job_id=job_id)
        (job,) = await jobs.claim(bus, q)
        await jobs.retry(bus, q, job.id, job.token, 0, 1, reason, buried=True)
    for chat in ("-1001", "-1002", "-1003", "-1004"):
        notices = [(ids.generate("JOB"), f'{{"chat": {chat}, "text": "🎲 new round"}}')
                   for _ in range(5)]  # fmt: skip
        await lanes.enqueue_many(bus, q, chat, notices)
    await lanes.pause(bus, q, "-1003")
    await lanes.pause_until(bus, q, "-1004", await bus.transport.server_time_ms() + 90_000)
    for minutes in (3, 45, 180):
        reminder = '{"chat": -1001, "text": "⏰ Round has started"}'
        await jobs.enqueue_in(bus, q, reminder, minutes * 60_000, job_id=ids.generate("JOB"))
    await repeat.register(bus, q, "daily-digest", DAY_MS, b'{"kind": "digest"}',
                          first_in_ms=5 * 3_600_000)  # fmt: skip
    await repeat.register(bus, q, "standings", 3_600_000, b'{"kind": "standings"}',
                          first_in_ms=20 * 60_000)  # fmt: skip
    await jobs.enqueue(bus, "cm.game", "start round", job_id=ids.generate("JOB"))
    await queues.set_limit(bus, q, 8)  # a queue-wide cap on jobs in flight, shown over the lists

    async def slow(job: Job) -> RetryIn | str | None:
        steps = rng.randint(2, 6)
        for step in range(steps):  # progress bars in the Running list
            await job.progress({"step": step, "of": steps})
            await trio.sleep(rng.uniform(0.1, 0.5))
        return RetryIn(200, "flaky") if rng.random() < 0.2 and job.attempts < 2 else "sent"

    async def produce(queue: str) -> None:
        while True:
            batch = [(ids.generate("JOB"), "mail") for _ in range(rng.randint(1, 6))]
            await jobs.enqueue_many(bus, queue, batch)
            await trio.sleep(rng.uniform(0.2, 0.6))

    for queue in (q, "mail"):
        await nursery.start(Consumer(bus, queue, slow, concurrency=2).run)
        await nursery.start(Metronome(bus, queue, beat_ms=200).run)
        nursery.start_soon(produce, queue)


async def shoot_dashboard(bus: Bus, out: Path) -> None:
    async with trio.open_nursery() as nursery:
        dashboard = Dashboard(bus, new_token(), sample_s=0.5, names_every_s=1,
                              emoji_font=EMOJI_FONT)  # fmt: skip
        url = await nursery.start(dashboard.serve, "127.0.0.1", 0)
        await fill_bus(bus, nursery)
        async with open_page() as page:
            await page.call("Emulation.setDeviceMetricsOverride", width=1280, height=1000,
                            deviceScaleFactor=1, mobile=False)  # fmt: skip
            await page.goto(f"{url}/?queue=cm.notify#token=x")
            await trio.sleep(10)  # let the charts fill: the point is to show them
            await until_shown(page, "#lanes", "paused")
            await until_shown(page, "#dead", "blocked")
            await until_shown(page, "#control", "at most 8 jobs in flight")
            await capture(page, out / "dashboard.png", 1280, 1000)
        nursery.cancel_scope.cancel()


async def fill_game(bus: Bus) -> str:
    rooms = [await game.create_room(bus, -501 - i, t) for i, t in
             enumerate(["Emoji Masters", "Friday Crew", "Night Owls"])]  # fmt: skip
    room = rooms[0]
    rnd = await game.start_round(bus, room.id, starts_in_ms=0, lasts_ms=95_000)
    names = ["Dana", "Ezra", "Kim 🦊", "Lou", "Mia", "Noor"]
    players = [await game.create_player(bus, n, 100 + i) for i, n in enumerate(names)]
    for p, pct in zip(players, [83, 67, 67, 50, 33, 17], strict=True):
        await board.record(bus, room.id, rnd.id, p.id, pct)
    return room.id


async def shoot_leaderboard(bus: Bus, out: Path) -> None:
    room = await fill_game(bus)
    async with trio.open_nursery() as nursery:
        feed_port = await nursery.start(Feed(bus).serve, "127.0.0.1", 0)
        url = await nursery.start(PageServer(bus, feed_port).serve, "127.0.0.1", 0)
        async with open_page() as page:
            await page.call("Emulation.setDeviceMetricsOverride", width=1100, height=760,
                            deviceScaleFactor=1, mobile=False)  # fmt: skip
            await page.goto(f"{url}/?room={room}")
            await until_shown(page, "#board", "Dana")
            await trio.sleep(1.5)  # the bars' animation settles
            await capture(page, out / "leaderboard.png", 1100, 760)
            await page.call("Emulation.setDeviceMetricsOverride", width=390, height=800,
                            deviceScaleFactor=1, mobile=True)  # fmt: skip
            await trio.sleep(1)
            await capture(page, out / "leaderboard-phone.png", 390, 800, mobile=True)
        nursery.cancel_scope.cancel()


async def until_shown(page: Page, selector: str, text: str) -> None:
    """Wait until ``selector``'s text holds ``text`` (``trio.TooSlowError`` after 30 s)."""
    with trio.fail_after(30):
        while True:
            if await _shows(page, selector, text):
                return
            await trio.sleep(0.1)


async def _shows(page: Page, selector: str, text: str) -> bool:
    found = await page.evaluate(f"(document.querySelector('{selector}') || {{}}).innerText || ''")
    return text in str(found)


DOCS = Path(__file__).resolve().parents[1] / "docs"
SITE_SHOTS = [
    # (page of the built site, file, width, height)
    ("index.html", "site-landing.png", 1280, 900),
    ("benchmarks/index.html", "site-benchmarks.png", 1280, 1100),
]


async def shoot_site(out: Path) -> None:
    """Build the docs site and capture its landing page and its benchmarks page."""
    with tempfile.TemporaryDirectory(prefix="docs-site-") as folder:
        built = Path(folder) / "html"
        await trio.run_process(
            [sys.executable, "-m", "sphinx", "-q", "-b", "html", str(DOCS), str(built)],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        async with open_page() as page:
            for name, file, width, height in SITE_SHOTS:
                await page.call("Emulation.setDeviceMetricsOverride", width=width,
                                height=height, deviceScaleFactor=1, mobile=False)  # fmt: skip
                await page.goto((built / name).as_uri())
                await until_shown(page, "article", "")
                await trio.sleep(1)  # the fonts and the figures settle
                await capture(page, out / file, width, height)


async def main(out: Path, only: str | None) -> None:
    await trio.Path(out).mkdir(parents=True, exist_ok=True)
    if only in (None, "app"):
        async with open_bus() as bus:
            await shoot_dashboard(bus, out)
            await shoot_leaderboard(bus, out)
    if only in (None, "site"):
        await shoot_site(out)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("docs"))
    parser.add_argument("--only", choices=["app", "site"], help="only these screenshots")
    args = parser.parse_args()
    trio.run(main, args.out, args.only)
