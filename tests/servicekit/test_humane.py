"""Times for people: ISO in UTC, spans in their two largest units, and "in"/"ago"."""

from hypothesis import given
from hypothesis import strategies as st

from servicekit import humane

H = 3_600_000


def test_iso_is_utc_to_the_second() -> None:
    assert humane.iso(0) == "1970-01-01T00:00:00Z"
    assert humane.iso(1_796_035_496_083) == "2026-11-30T10:44:56Z"
    assert humane.iso(None) == "-"


def test_span_reads_in_two_units() -> None:
    assert humane.span(250) == "250 ms"
    assert humane.span(42_000) == "42 s"
    assert humane.span(3 * H + 5 * 60_000 + 7_000) == "3 h 5 min"
    assert humane.span(3 * H + 7_000) == "3 h"  # no minutes: the seconds are below the two units
    assert humane.span(27 * H) == "1 d 3 h"
    assert humane.span(-90_000) == "1 min 30 s"


def test_relative_says_in_or_ago() -> None:
    now = 1_796_035_496_083
    assert humane.relative(now + 3 * H, now) == "in 3 h"
    assert humane.relative(now - 5 * 60_000, now) == "5 min ago"
    assert humane.relative(now + 400, now) == "now"
    assert humane.relative(None, now) == "-"
    assert humane.at(now + 3 * H, now) == "2026-11-30T13:44:56Z (in 3 h)"


def test_payloads_read_as_text_with_emoji() -> None:
    assert humane.payload_text(b'{"text": "\\ud83c\\udfc6 won"}') == '{"text": "🏆 won"}'
    assert humane.payload_text(b"plain\nline") == "plain\\nline"
    assert humane.payload_text(b'"\\ud83c"') == '"\\ud83c"'  # a lone surrogate stays escaped
    assert humane.payload_text(b"\xff") == "\ufffd"
    assert humane.payload_text("x" * 50, 10) == "x" * 9 + "…"


@given(st.integers(min_value=-(10**12), max_value=10**12))
def test_span_is_at_most_two_units_and_never_empty(ms: int) -> None:
    text = humane.span(ms)
    assert text and 1 <= len(text.split()) // 2 <= 2
