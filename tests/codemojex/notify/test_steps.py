"""The chat task's decisions (pure): which answer leads to which step."""

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from codemojex.notify.rate_limiter import Take
from codemojex.notify.steps import (
    AskBot,
    Booked,
    BotDown,
    Done,
    Flood,
    Follow,
    Hold,
    Send,
    StepPolicy,
    Stop,
    after_answer,
    after_asking,
    after_flood,
    after_take,
    slot_missed,
)
from codemojex.telegram.classify import (
    CAUSES,
    Delivered,
    Drop,
    Fatal,
    Migrate,
    RetryLater,
    classify,
)
from echomq_trio.settlement import Bury, DeferIn, RetryIn

POLICY = StepPolicy(hold_max_ms=2000, stuck_after_ms=60_000)


@given(st.integers(1, 10_000), st.sampled_from(["global", "chat", "paused"]))
def test_short_waits_are_held_and_long_ones_deferred(wait: int, why: str) -> None:
    step = after_take(Take(False, wait, why), POLICY)
    if wait <= POLICY.hold_max_ms:
        assert isinstance(step, Hold) and step.ms == wait
    else:
        assert isinstance(step, DeferIn) and step.delay_ms == wait
    assert step.reason == f"rate limit ({why})"
    assert after_take(Take(True), POLICY) == Send()
    assert after_take(Take(False, wait, "booked", "123:4"), POLICY) == Booked(wait)


def test_a_slot_is_missed_past_half_the_margin_or_after_an_answer_slower_than_the_margin() -> None:
    assert not slot_missed(-3.0, -1.0, 30) and not slot_missed(15.0, 30.0, 30)
    assert slot_missed(15.1, 20.0, 30) and slot_missed(1.0, 1.0, 0)
    # An answer that came late: the slot lies that far back, though the send follows it at once.
    assert slot_missed(0.0, 30.1, 30) and slot_missed(0.0, 6_000.0, 600)
    assert not slot_missed(0.0, 600.0, 600)


def test_each_answer_leads_to_its_step() -> None:
    rng = random.Random(1)
    assert after_answer(Delivered(7), 1, POLICY) == Done(7)
    assert after_answer(Migrate(-1009), 1, POLICY) == Follow(-1009)
    assert after_answer(Drop("Forbidden: bot was blocked by the user"), 1, POLICY) == Bury(
        "Forbidden: bot was blocked by the user"
    )
    assert after_answer(Fatal("unauthorized"), 1, POLICY) == Stop("unauthorized")
    assert after_answer(RetryLater("Too Many Requests", 3000, flood=True), 1, POLICY) == Flood(
        3000, "429: Too Many Requests"
    )
    # A 5xx or no answer may be Telegram's trouble for everyone: ask before spending the attempt.
    assert after_answer(classify(502, None), 1, POLICY) == AskBot(
        "HTTP 502 Bad Gateway: not JSON", 0, "server_error"
    )
    # So is an answer that is not the Bot API's, whatever its status: a 200 page, a cut body.
    assert after_answer(classify(200, None), 1, POLICY) == AskBot(
        "HTTP 200 OK: not JSON", 0, "not_bot_api"
    )
    assert after_answer(classify(200, [1]), 1, POLICY) == AskBot(
        "HTTP 200 OK: JSON but not the Bot API's (an array)", 0, "not_bot_api"
    )
    # Any other transient answer is the chat's: the attempt is spent, backed off.
    step = after_answer(
        classify(403, {"ok": False, "description": "Forbidden: odd"}), 3, POLICY, rng
    )
    assert isinstance(step, RetryIn) and 0 <= step.delay_ms <= 2000


@given(st.integers(1, 6), st.integers(0, 40_000))
def test_asking_the_bot_and_failing_is_an_outage_and_succeeding_spends_the_attempt(
    attempts: int, floor: int
) -> None:
    for cause in CAUSES:
        probe = AskBot("Bad Gateway", floor, cause)
        assert after_asking(True, probe, attempts, POLICY) == BotDown("Bad Gateway", cause)
        step = after_asking(False, probe, attempts, POLICY, random.Random(attempts))
        assert isinstance(step, RetryIn)
        assert step.reason == "Bad Gateway (getMe answered: this chat's failure)"
        assert floor <= step.delay_ms <= max(floor, 500 * 2 ** (attempts - 1))


@given(st.integers(1, 10_000), st.integers(0, 120_000))
def test_a_429_is_held_deferred_or_after_the_cap_dead(wait: int, flooded: int) -> None:
    step = after_flood(wait, flooded, POLICY)
    if flooded >= POLICY.stuck_after_ms:
        assert isinstance(step, Bury) and "stuck" in step.reason
    elif wait <= POLICY.hold_max_ms:
        assert step == Hold(wait, "429")
    else:
        assert step == DeferIn(wait, "429")


def test_a_policy_refuses_what_makes_no_sense() -> None:
    for bad in ({"hold_max_ms": -1}, {"stuck_after_ms": 0}, {"max_attempts": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            StepPolicy(**bad)
