"""Cron expressions in a time zone (pure): the next occurrence strictly after an instant, across
spring-forwards and fall-backs in Europe/Berlin, America/New_York and Australia/Lord_Howe (a
30-minute shift), and the properties every answer keeps."""

import datetime as dt
import itertools
import zoneinfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from echomq_trio import cron
from echomq_trio.dashboard import view
from echomq_trio.results import Registration

UTC = dt.UTC


def ms(iso: str) -> int:
    """Unix ms of an ISO time with its offset (or ``Z``)."""
    return int(dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


def local(at_ms: int, tz: str) -> str:
    """``2026-03-29T03:00:00+02:00``: an instant in a zone."""
    t = dt.datetime.fromtimestamp(at_ms / 1000, UTC).astimezone(zoneinfo.ZoneInfo(tz))
    return t.isoformat()


def runs(expr: str, tz: str, after: str, n: int) -> list[str]:
    c = cron.parse(expr, tz)
    return [local(m, tz) for m in cron.upcoming(c, ms(after), n)]


# 2026: Europe/Berlin springs 02:00 -> 03:00 on 29 March and falls 03:00 -> 02:00 on 25 October;
# America/New_York springs 02:00 -> 03:00 on 8 March and falls 02:00 -> 01:00 on 1 November;
# Australia/Lord_Howe falls 02:00 -> 01:30 on 5 April and springs 02:00 -> 02:30 on 4 October.
@pytest.mark.parametrize(
    ("expr", "tz", "after", "expected"),
    [
        # A time of day skipped by a spring-forward runs once, at the end of the gap.
        ("30 2 * * *", "Europe/Berlin", "2026-03-28T12:00+01:00",
         ["2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"]),
        ("30 2 * * *", "America/New_York", "2026-03-07T12:00-05:00",
         ["2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"]),
        ("15 2 * * *", "Australia/Lord_Howe", "2026-10-03T12:00+10:30",
         ["2026-10-04T02:30:00+11:00", "2026-10-05T02:15:00+11:00"]),
        # Two times in one gap run once, together; the time just after the gap too.
        ("0,30 2 * * *", "Europe/Berlin", "2026-03-28T12:00+01:00",
         ["2026-03-29T03:00:00+02:00", "2026-03-30T02:00:00+02:00"]),
        ("30 1,2,3 * * *", "Europe/Berlin", "2026-03-29T01:00+01:00",
         ["2026-03-29T01:30:00+01:00", "2026-03-29T03:00:00+02:00", "2026-03-29T03:30:00+02:00"]),
        # A time of day repeated by a fall-back runs once, the first time.
        ("30 2 * * *", "Europe/Berlin", "2026-10-24T12:00+02:00",
         ["2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"]),
        ("30 1 * * *", "America/New_York", "2026-10-31T12:00-04:00",
         ["2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"]),
        ("45 1 * * *", "Australia/Lord_Howe", "2026-04-04T12:00+11:00",
         ["2026-04-05T01:45:00+11:00", "2026-04-06T01:45:00+10:30"]),
        # ... also counted from inside the repeated hour: its first copy has passed.
        ("45 2 * * *", "Europe/Berlin", "2026-10-25T02:30+01:00",
         ["2026-10-26T02:45:00+01:00"]),
        # The same with a seconds field (six fields follow the same rule).
        ("0 30 2 * * *", "Europe/Berlin", "2026-03-28T12:00+01:00",
         ["2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"]),
        ("0 30 2 * * *", "Europe/Berlin", "2026-10-24T12:00+02:00",
         ["2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"]),
        # A wildcard hour runs at every instant whose local time matches: both copies of the
        # repeated hour, none in the gap.
        ("0 * * * *", "America/New_York", "2026-11-01T00:30-04:00",
         ["2026-11-01T01:00:00-04:00", "2026-11-01T01:00:00-05:00", "2026-11-01T02:00:00-05:00"]),
        ("0 * * * *", "Europe/Berlin", "2026-03-29T00:30+01:00",
         ["2026-03-29T01:00:00+01:00", "2026-03-29T03:00:00+02:00"]),
        ("*/20 * * * *", "Australia/Lord_Howe", "2026-04-05T01:30+11:00",
         ["2026-04-05T01:40:00+11:00", "2026-04-05T01:40:00+10:30", "2026-04-05T02:00:00+10:30"]),
        # Week days in the zone's calendar, not UTC's.
        ("0 9 * * MON-FRI", "Europe/Berlin", "2026-12-04T09:00+01:00",
         ["2026-12-07T09:00:00+01:00", "2026-12-08T09:00:00+01:00"]),
        ("0 0 * * MON", "America/New_York", "2026-12-06T23:59-05:00",
         ["2026-12-07T00:00:00-05:00"]),
    ],
)  # fmt: skip
def test_next_runs_across_dst(expr: str, tz: str, after: str, expected: list[str]) -> None:
    assert runs(expr, tz, after, len(expected)) == expected


def test_a_day_with_a_fall_back_runs_a_time_of_day_once() -> None:
    for expr, tz, day in [
        ("30 2 * * *", "Europe/Berlin", "2026-10-25"),
        ("30 1 * * *", "America/New_York", "2026-11-01"),
        ("45 1 * * *", "Australia/Lord_Howe", "2026-04-05"),
    ]:
        got = runs(expr, tz, "2026-01-01T00:00Z", 365)
        assert sum(r.startswith(day) for r in got) == 1, (expr, tz)
        assert len(got) == len(set(got)) == 365  # every other day once too


def test_counted_strictly_after_and_on_whole_seconds() -> None:
    c = cron.parse("* * * * * *")
    assert cron.next_after(c, 5_000) == 6_000
    assert cron.next_after(c, 5_001) == 6_000
    assert cron.next_after(c, 4_999) == 5_000
    assert cron.upcoming(c, 0, 3) == [1_000, 2_000, 3_000]
    every_15 = cron.parse("*/15 * * * * *", "Europe/Berlin")
    assert cron.upcoming(every_15, ms("2026-10-25T00:59:59Z"), 2) == [
        ms("2026-10-25T01:00:00Z"), ms("2026-10-25T01:00:15Z"),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("expr", "tz", "message"),
    [
        ("0 9 * *", "UTC", "has 4 fields, expected 5"),
        ("61 * * * *", "UTC", "Bad minute"),
        ("0 9 * * FUNDAY", "UTC", "Bad day-of-week"),
        ("0 0 30 2 *", "UTC", "Bad day-of-month"),
        ("* * * * *", "Mars/Olympus", "unknown time zone 'Mars/Olympus'"),
        ("* * * * *", "../../etc/passwd", "unknown time zone"),
        ("* * * * *", "", "unknown time zone"),
    ],
)
def test_bad_expressions_and_zones_are_one_line_value_errors(
    expr: str, tz: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message) as err:
        cron.parse(expr, tz)
    assert "\n" not in str(err.value)


def test_non_strings_are_type_errors() -> None:
    with pytest.raises(TypeError, match="cron must be a str"):
        cron.parse(5, "UTC")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="tz must be a str"):
        cron.parse("* * * * *", None)  # type: ignore[arg-type]


EXPRS = [
    "* * * * *", "*/7 * * * *", "0 * * * *", "30 2 * * *", "0 2,3 * * *", "15 1-3 * * *",
    "0 9 * * MON-FRI", "0 0 1 * *", "0 12 L * *", "5 4 * * SUN#2", "*/20 * * * * *",
    "0 30 2 * * *", "0 0,30 1,2 * * *",
]  # fmt: skip
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"]
# Instants around the DST changes of 2026, and anywhere from 2000 to 2040.
NEAR = [ms(t) for t in ("2026-03-29T01:00Z", "2026-10-25T01:00Z", "2026-03-08T07:00Z",
                        "2026-11-01T06:00Z", "2026-04-04T15:00Z", "2026-10-03T15:30Z")]  # fmt: skip
instants = st.one_of(
    st.sampled_from(NEAR).flatmap(lambda t: st.integers(t - 4 * 3_600_000, t + 4 * 3_600_000)),
    st.integers(ms("2000-01-01T00:00Z"), ms("2040-01-01T00:00Z")),
)


def is_occurrence(c: cron.Cron, at_ms: int) -> bool:
    """``at_ms``'s local time matches the expression, or (a time of day) it ends a gap that
    swallowed a matching time."""
    t = dt.datetime.fromtimestamp(at_ms / 1000, UTC).astimezone(c.zone)
    naive = t.replace(tzinfo=None)
    if cron.upcoming(cron.parse(c.expr), _naive_ms(naive) - 1, 1) == [_naive_ms(naive)]:
        return True
    before = t - dt.timedelta(hours=1)
    return c.wall_clock and before.utcoffset() != t.utcoffset()


def _naive_ms(naive: dt.datetime) -> int:
    return int(naive.replace(tzinfo=UTC).timestamp()) * 1000


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(EXPRS), st.sampled_from(ZONES), instants, instants)
def test_next_is_after_an_occurrence_and_monotonic(expr: str, tz: str, t1: int, t2: int) -> None:
    c = cron.parse(expr, tz)
    n1, n2 = cron.next_after(c, t1), cron.next_after(c, t2)
    assert n1 is not None and n2 is not None
    assert n1 > t1 and n2 > t2
    assert is_occurrence(c, n1)
    if t1 <= t2:
        assert n1 <= n2
    # Nothing skipped: counted from just before it, the next run is the same.
    assert cron.next_after(c, n1 - 1) == n1
    # Successive runs are each the next after the one before.
    seq = cron.upcoming(c, t1, 4)
    assert seq[0] == n1 and all(cron.next_after(c, a) == b for a, b in itertools.pairwise(seq))


def test_the_dashboard_row_shows_the_schedule_zone_and_next_runs() -> None:
    first = ms("2026-10-24T07:00Z")  # 09:00 CEST, a Saturday
    reg = Registration("standup", first, None, b"s", None, None, "0 9 * * SAT,MON", "Europe/Berlin")
    row = view.repeat_row(reg, first - 60_000)
    assert (row["schedule"], row["zone"], row["every"]) == ("0 9 * * SAT,MON", "Europe/Berlin", "-")
    assert row["next_runs"] == [  # Berlin leaves summer time on Sunday 25 October
        {"local": "2026-10-24 09:00:00 CEST", "utc": "2026-10-24T07:00:00Z"},
        {"local": "2026-10-26 09:00:00 CET", "utc": "2026-10-26T08:00:00Z"},
        {"local": "2026-10-31 09:00:00 CET", "utc": "2026-10-31T08:00:00Z"},
    ]
    every = Registration("hourly", first, 3_600_000, b"h", None, None)
    row = view.repeat_row(every, first)
    assert (row["schedule"], row["zone"]) == ("every 1 h", "-")
    assert [r["utc"] for r in row["next_runs"]] == [
        "2026-10-24T07:00:00Z", "2026-10-24T08:00:00Z", "2026-10-24T09:00:00Z",
    ]  # fmt: skip
