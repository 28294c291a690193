"""The stand-in's flood model (pure): forgetting the sends no window sees never changes an
answer, and what it keeps is bounded by the limits."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from codemojex.standin.flood import (
    TELEGRAM_FLOOD,
    FloodModel,
    FloodRules,
    Penalty,
    Tracked,
    most_in_span,
    wait_for_slot,
)
from codemojex.telegram.limits import Limits, Window

LIMITS = Limits(global_=Window(5, 1000), private=Window(2, 300), group=Window(3, 2000))
CHATS = [1, 2, 3, -4, -5]


class Reference:
    """The model as it was before forgetting: every send kept, the same arithmetic."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.sends: list[tuple[int, float]] = []

    def retry_after(self, chat_id: int, now: float) -> float:
        chat = [t for c, t in self.sends if c == chat_id]
        return max(wait_for_slot([t for _, t in self.sends], self.limits.global_, now),
                   wait_for_slot(chat, self.limits.for_chat(chat_id), now))  # fmt: skip

    def chats_in_window(self, now: float) -> int:
        last = {c: t for c, t in self.sends}
        return sum(1 for c, t in last.items() if in_window(self.limits.for_chat(c), t, now))


def in_window(window: Window, t: float, now: float) -> bool:
    """A send at ``t`` counts at ``now``: the model's rule, in whole milliseconds."""
    return round(now * 1000) - round(t * 1000) < window.window_ms


steps = st.lists(
    st.tuples(st.sampled_from(CHATS), st.sampled_from([0.0, 0.01, 0.1, 0.29, 0.3, 0.7, 2.5])),
    max_size=300,
)


@settings(max_examples=200, deadline=None)
@given(steps)
def test_forgetting_never_changes_an_answer_and_keeps_only_what_windows_see(
    events: list[tuple[int, float]],
) -> None:
    model, reference = FloodModel(LIMITS), Reference(LIMITS)
    now = 1000.0
    for chat, dt in events:
        now += dt
        wait = model.retry_after(chat, now)
        expected = reference.retry_after(chat, now)
        assert wait == (None if expected <= 0 else max(1, -int(-expected // 1)))
        kept = model.tracked()
        # Exactly the chats sent to within their window are kept, each with at most its limit.
        assert kept.chats == reference.chats_in_window(now)
        assert kept.sends <= LIMITS.global_.limit + kept.chats * max(w.limit for w in (
            LIMITS.private, LIMITS.group))  # fmt: skip
        if wait is None:
            model.record(chat, now)
            reference.sends.append((chat, now))


def test_a_chat_is_forgotten_once_its_window_has_passed() -> None:
    model = FloodModel(Limits())  # private 3/3 s, group 20/60 s, the bot 30/1 s
    for chat in (7, -7):
        assert model.retry_after(chat, 100.0) is None
        model.record(chat, 100.0)
    assert model.tracked() == Tracked(chats=2, sends=4)
    model.retry_after(7, 102.9)
    assert model.tracked() == Tracked(chats=2, sends=2)  # the bot's window forgot both
    model.retry_after(7, 103.0)
    assert model.tracked() == Tracked(chats=1, sends=1)  # the private chat's 3 s are over
    model.retry_after(7, 159.9)
    assert model.tracked().chats == 1
    model.retry_after(7, 160.0)
    assert model.tracked() == Tracked(chats=0, sends=0)


def test_a_long_run_at_the_limit_keeps_one_window() -> None:
    # The bot's limit (30/s) spread over 5,000 chats, a fifth of them groups, for 20 simulated
    # minutes: the model holds the chats of the last 60 s at most (the group window).
    limits = Limits()
    model = FloodModel(limits)
    pool = [c if c % 5 else -c for c in range(1, 5001)]
    now, most = 0.0, Tracked(0, 0)
    for i in range(36_000):
        now += 1 / 30 + 1e-6
        chat = pool[i % len(pool)]
        assert model.retry_after(chat, now) is None
        model.record(chat, now)
        if i % 30 == 0:  # once a simulated second
            kept = model.tracked()
            most = Tracked(max(most.chats, kept.chats), max(most.sends, kept.sends))
    # 60 s of sends, a fifth of them to groups (360 chats), and 3 s of private ones (72).
    assert 400 < most.chats <= 360 + 72 + 2
    assert most.sends <= most.chats + limits.global_.limit


def test_most_in_span_is_half_open() -> None:
    assert most_in_span([], 1.0) == 0
    assert most_in_span([0.0, 0.5, 1.0, 1.4], 1.0) == 3  # [0.5, 1.5)
    assert most_in_span([0.0, 1.0], 1.0) == 1


def test_waits_are_whole_milliseconds_so_float_noise_never_moves_an_answer() -> None:
    """In floats ``1.003 + 1.0 - 1.003`` is 1.0000000000000002 (a wait of 1 s answered
    ``retry_after`` 2) and ``1.001 - 0.001`` is 0.9999999999999999 (a send exactly one window
    later refused): the model works in whole milliseconds."""
    one_per_s = Window(1, 1000)
    assert wait_for_slot([1.003], one_per_s, 1.003) == 1.0
    assert wait_for_slot([0.001], one_per_s, 1.001) == 0.0
    assert wait_for_slot([0.001], one_per_s, 1.0004) == 0.001  # the least wait: 1 ms
    assert wait_for_slot([2.5, 2.9], Window(2, 1000), 3.0) == 0.5
    model = FloodModel(FloodRules(bot=one_per_s, private=Window(9, 1000), group=one_per_s))
    model.record(1, 1.003)
    assert model.retry_after(2, 1.003) == 1  # the bot's window frees in exactly 1 s
    assert model.retry_after(2, 2.002) == 1  # refused until 2.003 ...
    assert model.retry_after(2, 2.003) is None  # ... and not a millisecond more
    model.record(2, 2.003)
    assert model.retry_after(3, 3.003) is None  # one window after a send, the next fits


def test_repeated_violations_grow_the_wait_and_are_forgiven() -> None:
    rules = FloodRules(bot=Window(100, 1000), private=Window(1, 1000), group=Window(1, 1000),
                       penalty=Penalty(growth=2.0, max_s=10, forgive_s=30.0))  # fmt: skip
    model = FloodModel(rules)
    model.record(7, 0.0)
    assert model.retry_after(7, 0.5) == 1  # the first violation: until the window frees
    assert model.retry_after(7, 0.6) == 1  # inside the wait: what is left of it
    assert model.retry_after(8, 0.6) is None  # another chat is not punished
    waits = []
    now = 1.5
    for _ in range(4):  # the client honours retry_after, but breaks the window again each time
        assert model.retry_after(7, now) is None
        model.record(7, now)
        waits.append(model.retry_after(7, now + 0.25))
        assert waits[-1] is not None
        assert model.retry_after(7, now + 0.25 + waits[-1] - 0.01) is not None  # still refused
        now += 0.25 + waits[-1]
    assert waits == [2, 4, 8, 10]  # doubled each time, up to max_s
    assert model.tracked().penalised == 1
    assert model.retry_after(9, now + 30.0) is None
    assert model.tracked().penalised == 0  # forgiven and forgotten: memory stays bounded
    model.record(7, now + 30.0)
    assert model.retry_after(7, now + 30.5) == 1  # a fresh start


def test_a_bot_wide_violation_punishes_the_bot() -> None:
    rules = FloodRules(bot=Window(2, 1000), private=Window(10, 1000), group=Window(10, 1000))
    model = FloodModel(rules)
    for chat in (1, 2):
        model.record(chat, 0.0)
    assert model.retry_after(3, 0.1) == 1  # the bot's window: refused until 1.1
    assert model.retry_after(4, 0.2) == 1  # every chat waits with it
    assert model.retry_after(5, 1.05) == 1  # the window has room, the wait is not over
    assert model.retry_after(5, 1.1) is None
    for chat in (5, 6):
        model.record(chat, 1.1)
    assert model.retry_after(7, 1.2) == 2  # broken again soon after: doubled


def test_rules_default_to_telegrams_figures_and_scale() -> None:
    assert TELEGRAM_FLOOD.bot == Window(30, 1000)
    assert (TELEGRAM_FLOOD.private, TELEGRAM_FLOOD.group) == (Window(3, 3000), Window(20, 60_000))
    assert TELEGRAM_FLOOD.penalty.growth > 1
    fast = TELEGRAM_FLOOD.scaled(10)
    assert (fast.bot, fast.group) == (Window(30, 100), Window(20, 6000))
    assert fast.penalty.forgive_s == TELEGRAM_FLOOD.penalty.forgive_s / 10
    same = FloodRules.matching(Limits().scaled(2))
    assert (same.bot, same.penalty) == (Limits().scaled(2).global_, Penalty.NONE)
    assert FloodModel(Limits()).rules == FloodRules.matching(Limits())


def test_penalties_are_forgotten_so_memory_stays_bounded() -> None:
    # 20,000 chats each break their window once, 8 a second (times exact in binary) for 2,500
    # simulated seconds: the model keeps the penalties of the last max_s + forgive_s only.
    rules = FloodRules(private=Window(1, 1000), penalty=Penalty(max_s=5, forgive_s=10.0))
    model = FloodModel(rules)
    most = 0
    for i in range(20_000):
        now, chat = i / 8, i + 1
        model.record(chat, now)
        assert model.retry_after(chat, now) == 1
        most = max(most, model.tracked().penalised)
    assert most <= (5 + 10) * 8 + 1
