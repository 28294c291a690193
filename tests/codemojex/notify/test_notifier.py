import json

import pytest

from codemojex import ids
from codemojex.notify.notice import decode
from codemojex.notify.notifier import job_id_of, notify
from echomq_trio import Bus, jobs, lanes


async def test_notify_enqueues_on_the_chat_lane_with_limit_one(bus: Bus, queue: str) -> None:
    first = await notify(bus, -1001234567890, "hello", queue=queue)
    second = await notify(bus, -1001234567890, "again", {"parse_mode": "HTML"}, queue=queue)
    assert ids.is_valid(first, "NOT") and ids.is_valid(second, "NOT") and first < second
    (status,) = await lanes.status(bus, queue, ["-1001234567890"])
    assert (status.depth, status.limit) == (2, 1)
    rows = await lanes.jobs(bus, queue, "-1001234567890")
    payloads = [json.loads(r.payload) for r in rows]
    assert payloads[0] == {"chat": -1001234567890, "text": "hello", "opts": {}, "id": first}
    assert [r.id for r in rows] == [job_id_of(first), job_id_of(second)]  # found by notice id
    assert decode(b'{"chat": 1, "text": "old", "attempt": 1}').text == "old"  # old payloads
    assert decode(rows[1].payload).opts == {"parse_mode": "HTML"}
    (job,) = await jobs.claim(bus, queue, 5)  # limit 1: one at a time per chat
    assert decode(job.payload).id == first


@pytest.mark.parametrize(
    ("chat", "text", "opts", "words"),
    [
        ("123", "hi", None, "chat id"),
        (1.5, "hi", None, "chat id"),
        (True, "hi", None, "chat id"),
        (1, "", None, "non-empty"),
        (1, "   ", None, "non-empty"),
        (1, "x" * 4097, None, "4096"),
        (1, "hi", ["parse_mode"], "opts"),
        (1, "hi", {"when": object()}, "JSON"),
    ],
)
async def test_bad_notices_are_refused(
    bus: Bus, queue: str, chat: object, text: object, opts: object, words: str
) -> None:
    with pytest.raises(ValueError, match=words):
        await notify(bus, chat, text, opts, queue=queue)  # type: ignore[arg-type]
    assert not (await jobs.counts(bus, queue)).exists


async def test_text_of_exactly_4096_characters_is_fine(bus: Bus, queue: str) -> None:
    await notify(bus, 5, "é" * 4096, queue=queue)

    assert (await jobs.counts(bus, queue)).pending == 1


def test_decode_refuses_what_is_not_a_notice() -> None:
    for bad in (b"not json", b"{}", b'{"chat": "x", "text": "y"}', b'{"chat": 1, "text": ""}'):
        with pytest.raises(ValueError):
            decode(bad)
