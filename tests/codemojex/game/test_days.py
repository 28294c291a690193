"""Days of the game (pure): UTC day numbers, their labels, which day a digest reports and when a
new digest first fires."""

from hypothesis import given
from hypothesis import strategies as st

from codemojex.game import days
from codemojex.game.rules import DAY_MS

# 2026-12-01T00:00:00Z
DEC_1 = 1_796_083_200_000


def test_days_are_utc_calendar_days() -> None:
    assert days.day_of(DEC_1) == days.day_of(DEC_1 + DAY_MS - 1) == days.day_of(DEC_1 - 1) + 1
    assert days.day_label(days.day_of(DEC_1)) == "2026-12-01"
    assert days.day_label(0) == "1970-01-01"


def test_a_digest_reports_the_day_before_it_fired() -> None:
    fired = DEC_1 + days.DIGEST_AFTER_MIDNIGHT_MS
    assert days.day_label(days.digest_day(fired)) == "2026-11-30"


@given(st.integers(min_value=0, max_value=2**45))
def test_a_new_digest_fires_just_after_the_next_midnight(now: int) -> None:
    wait = days.next_digest_in_ms(now)
    assert 0 < wait <= DAY_MS
    assert (now + wait) % DAY_MS == days.DIGEST_AFTER_MIDNIGHT_MS
