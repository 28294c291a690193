"""Telegram's health as the worker sees it (pure): when a request left unanswered is an outage,
when such an outage is over, what a failed probe does to it, and the lines that say so."""

from hypothesis import given
from hypothesis import strategies as st

from codemojex.notify.health import Trouble, began, ended, hang_over, hanging, note, paused
from codemojex.telegram.bot import Answer, InFlight
from codemojex.telegram.classify import CAUSES

T0_MS = 1_795_000_000_000  # 2026-11-18T11:06:40Z
TIMES = st.floats(0, 10_000, allow_nan=False)
LIMITS = st.floats(0.01, 100, allow_nan=False)


def request(started: float, chat: int | None = 42) -> InFlight:
    return InFlight("sendMessage" if chat else "getMe", chat, started, T0_MS)


@given(TIMES, st.floats(0, 1000, allow_nan=False), LIMITS)
def test_a_request_unanswered_for_the_limit_begins_an_outage_and_not_before(
    started: float, waited: float, limit: float
) -> None:
    now = started + waited
    trouble = hanging(request(started), now, limit)
    if now - started < limit:
        assert trouble is None
    else:
        assert trouble == Trouble("unanswered", "sendMessage to chat 42", started, T0_MS, now)
    assert hanging(None, now, limit) is None  # nothing in flight: nothing hangs


@given(TIMES, st.floats(0, 100, allow_nan=False), st.floats(-50, 50, allow_nan=False),
       st.floats(0, 100, allow_nan=False), st.none() | st.floats(0, 100, allow_nan=False), LIMITS,
       st.booleans())  # fmt: skip
def test_an_outage_that_paused_nothing_ends_with_a_prompt_answer_after_it_and_nothing_hanging(
    noticed: float, later: float, answer_offset: float, answer_took: float,
    oldest_wait: float | None, limit: float, was_paused: bool,
) -> None:  # fmt: skip
    trouble = Trouble("unanswered", "getMe", noticed - limit, T0_MS, noticed, paused=was_paused)
    now = noticed + later
    answer = Answer(noticed + answer_offset, answer_took)
    oldest = None if oldest_wait is None else request(now - oldest_wait)
    over = hang_over(trouble, oldest, answer, now, limit)
    expected = (
        not was_paused  # a paused one ends only when a probe succeeds
        and answer.at > noticed  # an answer that came before it was noticed says nothing
        and answer.waited < limit  # nor does one as late as a hang: Telegram is still slow
        and (oldest is None or now - oldest.started < limit)  # and nothing hangs now
    )
    assert over == expected
    assert not hang_over(trouble, oldest, None, now, limit)  # no answer yet: not over


@given(st.sampled_from(CAUSES), TIMES)
def test_a_failed_probe_pauses_the_outage_going_on_or_begins_one(cause: str, now: float) -> None:
    fresh = paused(None, "HTTP 200 OK: not JSON", cause, now, T0_MS)
    assert fresh == Trouble(cause, "HTTP 200 OK: not JSON", now, T0_MS, now, paused=True)
    hang = Trouble("unanswered", "sendMessage to chat 7", now - 6, T0_MS, now - 1)
    joined = paused(hang, "no answer: ReadTimeout", cause, now, T0_MS + 6000)
    # Still the one outage the hang began: its cause, its start, only now paused.
    assert joined == Trouble("unanswered", "sendMessage to chat 7", now - 6, T0_MS, now - 1, True)


def test_the_lines_name_what_fails_since_when_and_how_long_it_lasted() -> None:
    hang = Trouble("unanswered", "sendMessage to chat 42", 100.0, T0_MS, 105.0)
    assert began(hang, 105.25) == (
        "Telegram has not answered sendMessage to chat 42 since 2026-11-18T11:06:40Z (5.2 s): "
        "it hangs; sending goes on until getMe gets no answer either"
    )
    assert ended(hang, 107.5) == (
        "Telegram answers the bot again after 7 s (outage since 2026-11-18T11:06:40Z: Telegram "
        "has not answered sendMessage to chat 42)"
    )
    garbage = paused(None, 'HTTP 200 OK: not JSON (text/html, "Network notice")', "not_bot_api",
                     100.0, T0_MS)  # fmt: skip
    assert began(garbage, 100.0) == (
        "Telegram's answers are not the Bot API's (HTTP 200 OK: not JSON (text/html, \"Network "
        'notice")) since 2026-11-18T11:06:40Z, and getMe too: sending paused until it answers'
    )
    assert ended(garbage, 162.0).startswith("Telegram answers the bot again after 1 min 2 s (")
    assert ended(garbage, 162.0).endswith("): sending resumed")
    assert note(None, 5.0) == ""
    assert note(garbage, 142.0) == (
        " | TELEGRAM OUTAGE 42 s: Telegram's answers are not the Bot API's (HTTP 200 OK: not "
        'JSON (text/html, "Network notice")) since 2026-11-18T11:06:40Z; sending paused'
    )
    assert note(garbage, 160.0).startswith(" | TELEGRAM OUTAGE 1 min: Telegram's answers")
    assert note(hang, 99.0).startswith(" | TELEGRAM OUTAGE 0 ms: Telegram has not answered")
    for cause in CAUSES:  # every cause reads as a sentence
        assert paused(None, "x", cause, 0.0, T0_MS).headline.startswith("Telegram")
