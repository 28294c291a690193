"""The stand-in's memory stays flat however many messages it takes, and its totals stay right.

The messages go through the stand-in's ASGI app in this process, not over HTTP: over loopback
HTTP the stand-in answers about 350 requests a second on this project's 2-core machines (client
and server share one core's worth of Python), so 40,000 would take two minutes, six with
tracemalloc on; in process it is about 10,000 a second. What HTTP adds (hypercorn's
per-connection state) is not the stand-in's to keep; ``test_bot_api`` checks the same bounds and
totals over real HTTP with fewer messages. Marked ``slow`` (about 20 s), so the fast tier stays
fast.
"""

from __future__ import annotations

import gc
import json
import tracemalloc
from collections import Counter
from typing import Any

import pytest

from codemojex.standin.bot_api import Limits, TelegramStandIn

TOKEN = "123456:TEST"
KEEP = 500
WARM_UP = 8_000  # untraced: fills the kept records, the flood windows and every chat's counter
SETTLE = 2_000  # traced: replaces every kept record with one allocated under tracemalloc
REST = 30_000  # traced and measured, as in issue 15 (+15 MiB over the last 30,000 of 40,000)
STEP_S = 0.035  # about 28.6 messages a second: under the bot's 30/s, so most are delivered
# Bytes over the REST messages: about 4 a message. With every record kept (keep=10**6) the same
# run grows by 12 MB, 400 bytes a message; bounded, it grows by about 1 KB. Tables that resize
# as chats come and go (the flood model's) move it by tens of KB either way.
GROWTH_BOUND = 128 * 1024


class ManualClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Client:
    """Calls the app as hypercorn would, one request at a time, and tallies what it answered."""

    def __init__(self, tg: TelegramStandIn) -> None:
        self.tg = tg
        self.scope: dict[str, Any] = {
            "type": "http", "method": "POST", "path": f"/bot{TOKEN}/sendMessage",
            "query_string": b"", "headers": [(b"content-type", b"application/json")],
        }  # fmt: skip
        self.statuses: Counter[int] = Counter()
        self.delivered: Counter[int] = Counter()
        self.ids_in_order = True  # each chat's message ids went 1, 2, 3, ...

    async def send(self, chat_id: int, text: str) -> None:
        body = json.dumps({"chat_id": chat_id, "text": text}).encode()
        request = {"type": "http.request", "body": body, "more_body": False}
        answer: list[Any] = []

        async def receive() -> dict[str, Any]:
            return request

        async def send(message: dict[str, Any]) -> None:
            answer.append(message)

        await self.tg.app(self.scope, receive, send)  # type: ignore[arg-type]
        status = answer[0]["status"]
        self.statuses[status] += 1
        if status == 200:
            self.delivered[chat_id] += 1
            got = json.loads(answer[1]["body"])["result"]["message_id"]
            self.ids_in_order &= got == self.delivered[chat_id]


async def traffic(client: Client, clock: ManualClock, first: int, last: int) -> None:
    """Messages ``first`` to ``last - 1``: a round of notices to a pool of 2,500 chats (a fifth
    of them groups), a burst of 4 to one private chat every 50 (its fourth gets a 429), an empty
    text every 97 (a 400)."""
    pool = [c if c % 5 else -c for c in range(1, 2501)]
    for i in range(first, last):
        clock.now += STEP_S
        chat = pool[i % len(pool)]
        await client.send(chat, f"Round {i} results: 1. Alice 93% 2. Bob 87% 3. Chen 71%")
        if i % 50 == 0:
            for n in range(4):
                await client.send(7, f"burst {i}.{n}")
        if i % 97 == 0:
            await client.send(chat, "")


def traced_bytes() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


@pytest.mark.slow  # about 20 s: tracemalloc makes every allocation four times as dear
@pytest.mark.timeout_s(180)
async def test_forty_thousand_messages_leave_memory_flat_and_totals_right() -> None:
    clock = ManualClock()
    tg = TelegramStandIn(TOKEN, Limits(), keep=KEEP, clock=clock)
    client = Client(tg)
    await traffic(client, clock, 0, WARM_UP)
    tracemalloc.start()
    try:
        await traffic(client, clock, WARM_UP, WARM_UP + SETTLE)
        before = traced_bytes()
        await traffic(client, clock, WARM_UP + SETTLE, WARM_UP + SETTLE + REST)
        after = traced_bytes()
    finally:
        tracemalloc.stop()
    # Everything this process allocated and still holds, not only the stand-in's own modules.
    assert after - before < GROWTH_BOUND, f"{before} bytes, then {after} after {REST} messages"

    stats = tg.statistics()
    assert client.statuses[429] > 0 and client.statuses[400] > 0  # the traffic had all three
    assert stats.statuses == dict(client.statuses)
    assert stats.requests == client.statuses.total() > WARM_UP + SETTLE + REST
    assert stats.delivered == client.statuses[200] == tg.delivered() == client.delivered.total()
    assert stats.rate_limited == tg.rate_limited == client.statuses[429]
    assert stats.chats == len(client.delivered) == 2500
    assert all(tg.delivered(chat) == n for chat, n in client.delivered.items())
    assert client.ids_in_order
    # The records kept are the most recent KEEP of each; the flood model holds one window.
    assert len(tg.requests) == len(tg.deliveries) == KEEP
    assert tg.deliveries[-1].text.startswith(f"Round {WARM_UP + SETTLE + REST - 1} ")
    assert tg.flood is not None
    kept = tg.flood.tracked()
    assert kept.chats <= 60 / STEP_S + 1  # at most the chats sent to in the last 60 s
