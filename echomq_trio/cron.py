"""Cron expressions in a time zone (pure): when a cron schedule next runs after an instant.

Lua cannot compute cron, so a cron registration's next run is computed here, by whoever fires
it (``repeat.fire``: the metronome), and stored with the registration; the fire script moves a
registration only from the run it was read at to the run computed here (compare-and-set), so
any number of metronomes still fire each occurrence once. Instants are Unix ms (the server's
clock); occurrences fall on whole seconds.

The expressions are ``cronsim``'s (Debian cron's five fields, ``minute hour day-of-month month
day-of-week``, names such as ``MON-FRI`` and ``JAN``, ``L``, ``LW``, ``MON#2``), with an optional
sixth field in front for seconds (``*/15 * * * * *``: every 15 seconds). The zone is an IANA name
(``zoneinfo``; ``tzdata`` supplies the database where the platform has none).

Daylight saving time, the one rule (Debian cron's, kept by ``cronsim`` for five fields and by
this module for six):

- An expression whose minute and hour fields are both fixed (neither starts with ``*``: a time
  of day such as ``0 9 * * *`` or ``30 2 * * SUN``) is a wall-clock time. A local time skipped
  by a spring-forward runs once, at the first valid instant after the gap (02:30 on the night
  Europe/Berlin goes from 02:00 to 03:00 runs at 03:00 local); a local time repeated by a
  fall-back runs once, the first time (02:30 on the night Berlin goes from 03:00 back to 02:00
  runs at 02:30 summer time, 00:30 UTC, not again an hour later).
- An expression with a wildcard minute or hour (``*/15 * * * *``, ``0 * * * *``) runs at
  every instant whose local time matches: in a fall-back the repeated local times' occurrences
  run both times (every hour stays every hour), and the local times a spring-forward skips have
  none.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from collections.abc import Iterator

import attrs
from cronsim import CronSim, CronSimError

__all__ = ["Cron", "local_text", "next_after", "parse", "upcoming"]

_UTC = dt.UTC
# The instants a schedule is computed for: 1970 to 9000 (cronsim looks 50 years ahead at most).
_MAX_MS = 221_845_392_000_000


@attrs.frozen
class Cron:
    """A checked cron expression (``expr``, as given) in a zone (``tz``, an IANA name)."""

    expr: str
    tz: str
    zone: zoneinfo.ZoneInfo = attrs.field(eq=False, repr=False)
    wall_clock: bool = attrs.field(eq=False, repr=False)  # a time of day: see the module's rule


def parse(expr: str, tz: str = "UTC") -> Cron:
    """``expr`` in zone ``tz``, checked: ``ValueError`` (one line) for a bad expression, an
    unknown zone, or an expression that never occurs; ``TypeError`` for a non-string."""
    if not isinstance(expr, str):
        raise TypeError(f"cron must be a str, got {type(expr).__name__}")
    if not isinstance(tz, str):
        raise TypeError(f"tz must be a str (an IANA zone name), got {type(tz).__name__}")
    try:
        zone = zoneinfo.ZoneInfo(tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"unknown time zone {tz!r} (an IANA name, such as 'Europe/Berlin')"
        ) from None
    fields = expr.split()
    if len(fields) not in (5, 6):
        raise ValueError(
            f"cron expression {expr!r} has {len(fields)} fields, expected 5 "
            "(minute hour day-of-month month day-of-week) or 6 (seconds first)"
        )
    try:
        CronSim(expr, dt.datetime(2000, 1, 1))
    except CronSimError as exc:
        raise ValueError(f"cron expression {expr!r}: {exc}") from None
    minute, hour = fields[-5], fields[-4]
    cron = Cron(expr, tz, zone, not minute.startswith("*") and not hour.startswith("*"))
    if next_after(cron, 0) is None:
        raise ValueError(f"cron expression {expr!r} never occurs")
    return cron


def next_after(cron: Cron, after_ms: int) -> int | None:
    """The first occurrence of ``cron`` strictly after ``after_ms`` (Unix ms), in Unix ms; ``None``
    when there is none within 50 years of it."""
    return next(_occurrences(cron, after_ms), None)


def upcoming(cron: Cron, after_ms: int, n: int) -> list[int]:
    """The next ``n`` occurrences after ``after_ms`` (fewer if it stops occurring)."""
    out: list[int] = []
    for ms in _occurrences(cron, after_ms):
        if len(out) == n:
            break
        out.append(ms)
    return out


def local_text(at_ms: int, tz: str) -> str:
    """``2026-12-03 09:00:00 CET``: an instant as the zone ``tz`` reads it (its abbreviation, or
    its UTC offset where it has none)."""
    t = dt.datetime.fromtimestamp(at_ms // 1000, _UTC).astimezone(zoneinfo.ZoneInfo(tz))
    return t.strftime("%Y-%m-%d %H:%M:%S %Z")


def _occurrences(cron: Cron, after_ms: int) -> Iterator[int]:
    if not 0 <= after_ms <= _MAX_MS:
        raise ValueError(f"after_ms must be 0..{_MAX_MS}, got {after_ms!r}")
    after = dt.datetime.fromtimestamp(after_ms // 1000, _UTC).astimezone(cron.zone)
    last = after_ms
    if cron.wall_clock:
        # Wall-clock times, iterated on the naive local clock (each local time once), then
        # placed: a time in a gap moves to the first valid minute after it, a repeated time
        # takes its first instant (fold=0).
        naive = _run(cron.expr, after.replace(tzinfo=None))
        times: Iterator[int] = (_place(t, cron.zone) for t in naive)
    else:
        times = (_ms(t) for t in _run(cron.expr, after))
    for ms in times:
        if ms > last:  # strictly after; a time placed in a fold or gap can land before
            last = ms
            yield ms


def _run(expr: str, start: dt.datetime) -> Iterator[dt.datetime]:
    try:
        yield from CronSim(expr, start)
    except (StopIteration, OverflowError):  # nothing within 50 years; past the year 9999
        return


def _place(local: dt.datetime, zone: zoneinfo.ZoneInfo) -> int:
    t = local.replace(tzinfo=zone, fold=0)
    while _imaginary(t):
        t += dt.timedelta(minutes=1)
    return _ms(t)


def _imaginary(t: dt.datetime) -> bool:
    return t.astimezone(_UTC).astimezone(t.tzinfo).replace(tzinfo=None) != t.replace(tzinfo=None)


def _ms(t: dt.datetime) -> int:
    return int(t.timestamp()) * 1000
