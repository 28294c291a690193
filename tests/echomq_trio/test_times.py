"""Times for people: ISO in UTC, spans in their two largest units, and "in"/"ago"."""

from hypothesis import given
from hypothesis import strategies as st

from echomq_trio import times

H = 3_600_000


def test_iso_is_utc_to_the_second() -> None:
    assert times.iso(0) == "1970-01-01T00:00:00Z"
    assert times.iso(1_796_035_496_083) == "2026-11-30T10:44:56Z"
    assert times.iso(None) == "-"


def test_span_reads_in_two_units() -> None:
    assert times.span(250) == "250 ms"
    assert times.span(42_000) == "42 s"
    assert times.span(3 * H + 5 * 60_000 + 7_000) == "3 h 5 min"
    assert times.span(3 * H + 7_000) == "3 h"  # no minutes: the seconds are below the two units
    assert times.span(27 * H) == "1 d 3 h"
    assert times.span(-90_000) == "1 min 30 s"


def test_relative_says_in_or_ago() -> None:
    now = 1_796_035_496_083
    assert times.relative(now + 3 * H, now) == "in 3 h"
    assert times.relative(now - 5 * 60_000, now) == "5 min ago"
    assert times.relative(now + 400, now) == "now"
    assert times.relative(None, now) == "-"
    assert times.at(now + 3 * H, now) == "2026-11-30T13:44:56Z (in 3 h)"


@given(st.integers(min_value=-(10**12), max_value=10**12))
def test_span_is_at_most_two_units_and_never_empty(ms: int) -> None:
    text = times.span(ms)
    assert text and 1 <= len(text.split()) // 2 <= 2
