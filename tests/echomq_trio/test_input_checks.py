"""Bad input raises ``ValueError``/``TypeError`` before any I/O, across the bus's modules.

Two kinds of proof. The calls run on a bus whose connection is closed: a call that reached the
server would raise ``ConnectionLost``, so a ``ValueError`` means the check came first (and the
same calls with input at the limit do raise ``ConnectionLost``). And on a real server, a refused
call leaves no key behind.
"""

import datetime as dt
import math
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from echomq_trio import Bus, ConnectionLost, events, ids, jobs, lanes, open_bus, repeat
from echomq_trio._checks import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    MAX_DELAY_MS,
    MAX_PAYLOAD_BYTES,
    MAX_TIME_MS,
    check_when,
)
from echomq_trio.server import free_port

LIMIT = 1000  # the closed bus's payload limit
BIG = "x" * (LIMIT + 1)
J = ids.generate("JOB")
Call = Callable[[Bus], Awaitable[Any]]


@pytest.fixture
async def closed_bus(standalone_url: str) -> Bus:
    async with open_bus(standalone_url, max_payload_bytes=LIMIT) as bus:
        pass
    return bus


def _first(items: Any) -> Any:
    return items.__anext__()  # an async generator's first step: where its checks run


REFUSED: list[tuple[str, Call, str]] = [
    # payloads over the bus's limit, on every path that admits one
    ("enqueue", lambda b: jobs.enqueue(b, "q", BIG, job_id=J), "payload is 1001 bytes"),
    ("enqueue_many", lambda b: jobs.enqueue_many(b, "q", [(J, "ok"), (J, BIG)]), "limit of 1000"),
    ("enqueue_at", lambda b: jobs.enqueue_at(b, "q", BIG, 0, job_id=J), "limit of 1000"),
    ("enqueue_in", lambda b: jobs.enqueue_in(b, "q", BIG, 0, job_id=J), "limit of 1000"),
    ("lanes.enqueue", lambda b: lanes.enqueue(b, "q", "g", BIG, job_id=J), "limit of 1000"),
    ("lanes.enqueue_many", lambda b: lanes.enqueue_many(b, "q", "g", [(J, BIG)]), "limit of 1000"),
    ("register", lambda b: repeat.register(b, "q", "n", 1000, BIG), "limit of 1000"),
    # times and delays beyond what a sorted-set score holds exactly
    (
        "at+1",
        lambda b: jobs.enqueue_at(b, "q", "", MAX_TIME_MS + 1, job_id=J),
        "run_at_ms must be at most",
    ),
    (
        "at 2**63",
        lambda b: jobs.enqueue_at(b, "q", "", 2**63, job_id=J),
        "run_at_ms must be at most",
    ),
    ("at<0", lambda b: jobs.enqueue_at(b, "q", "", -1, job_id=J), "run_at_ms must be >= 0"),
    (
        "in+1",
        lambda b: jobs.enqueue_in(b, "q", "", MAX_DELAY_MS + 1, job_id=J),
        "delay_ms must be at most",
    ),
    (
        "in timedelta.max",
        lambda b: jobs.enqueue_in(b, "q", "", dt.timedelta.max, job_id=J),
        "delay_ms must be at most 8998403161718784 .*, got 86400000000000000$",
    ),
    (
        "at datetime.min",
        lambda b: jobs.enqueue_at(b, "q", "", dt.datetime.min.replace(tzinfo=dt.UTC), job_id=J),
        "run_at_ms must be >= 0, got -62135596800000$",
    ),
    ("retry", lambda b: jobs.retry(b, "q", J, 1, 2**60, 3), "delay_ms must be at most"),
    ("defer", lambda b: jobs.defer(b, "q", J, 1, 2**60), "delay_ms must be at most"),
    ("claim", lambda b: jobs.claim(b, "q", 1, 2**60), "lease_ms must be at most"),
    ("extend", lambda b: jobs.extend(b, "q", [(J, 1)], 2**60), "lease_ms must be at most"),
    ("pause_until", lambda b: lanes.pause_until(b, "q", "g", 2**53 + 1), "at_ms must be at most"),
    ("every", lambda b: repeat.register(b, "q", "n", 2**60, "t"), "every_ms must be at most"),
    ("first", lambda b: repeat.register(b, "q", "n", 1, "t", 2**60), "first_in_ms must be at most"),
    ("autoclaim", lambda b: events.autoclaim(b, "q", "g", "c", -1), "min_idle_ms must be >= 0"),
    # stream ids and counts
    ("read", lambda b: events.read(b, "q", after="bogus"), "after must be a stream id"),
    ("read $", lambda b: events.read(b, "q", after="$"), "after must be a stream id"),
    ("read 1-2-3", lambda b: events.read(b, "q", after="1-2-3"), "after must be a stream id"),
    ("read count", lambda b: events.read(b, "q", count=0), "count must be >= 1"),
    ("follow", lambda b: _first(events.follow(b, "q", after="x")), "after must be a stream id"),
    ("group", lambda b: events.create_group(b, "q", "g", start="-"), "start must be a stream id"),
    ("group id", lambda b: events.create_group(b, "q", "g", "0-x"), "start must be a stream id"),
    ("read_group", lambda b: events.read_group(b, "q", "g", "c", 0), "count must be >= 1"),
    ("ack", lambda b: events.ack(b, "q", "g", ["1-1", "nope"]), "stream id must be a stream id"),
    ("ack name", lambda b: events.ack(b, "q", "a b", ["1-1"]), "group must not contain"),
]


@pytest.mark.parametrize(("call", "message"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
async def test_refused_before_any_io(closed_bus: Bus, call: Call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        await call(closed_bus)


ADMITTED: list[tuple[str, Call]] = [
    ("payload at the limit", lambda b: jobs.enqueue(b, "q", "x" * LIMIT, job_id=J)),
    ("lane payload at the limit", lambda b: lanes.enqueue(b, "q", "g", b"x" * LIMIT, job_id=J)),
    ("template at the limit", lambda b: repeat.register(b, "q", "n", 1, "x" * LIMIT)),
    ("latest time", lambda b: jobs.enqueue_at(b, "q", "", MAX_TIME_MS, job_id=J)),
    ("longest delay", lambda b: jobs.enqueue_in(b, "q", "", MAX_DELAY_MS, job_id=J)),
    ("latest lane wait", lambda b: lanes.pause_until(b, "q", "g", MAX_TIME_MS)),
    ("read from the start", lambda b: events.read(b, "q", after="-")),
    ("read after ms", lambda b: events.read(b, "q", after="1700000000000")),
    ("read after ms-seq", lambda b: events.read(b, "q", after="1700000000000-3")),
    ("follow after 0", lambda b: _first(events.follow(b, "q", after="0"))),
    ("group from the end", lambda b: events.create_group(b, "q", "g", start="$")),
    ("ack ids", lambda b: events.ack(b, "q", "g", ["1-1", "2"])),
]


@pytest.mark.parametrize("call", [c[1] for c in ADMITTED], ids=[c[0] for c in ADMITTED])
async def test_input_at_the_limits_reaches_the_server(closed_bus: Bus, call: Call) -> None:
    with pytest.raises(ConnectionLost):  # it passed the checks and tried the closed connection
        await call(closed_bus)


@pytest.mark.parametrize(
    ("value", "error"),
    [(0, ValueError), (-1, ValueError), (MAX_PAYLOAD_BYTES + 1, ValueError), (True, TypeError),
     ("1", TypeError), (1.5, TypeError)],
)  # fmt: skip
async def test_open_bus_checks_the_payload_limit_first(value: Any, error: type[Exception]) -> None:
    start = trio.current_time()
    with pytest.raises(error, match="max_payload_bytes must be"):  # not ConnectionLost
        async with open_bus(f"redis://127.0.0.1:{free_port()}", max_payload_bytes=value):
            pass
    with pytest.raises(error, match="max_payload_bytes must be"):
        async with open_bus(max_payload_bytes=value):  # no embedded server is started
            pass
    assert trio.current_time() - start < 1, "a server was started or a connection tried"


async def test_a_refused_call_writes_nothing(bus: Bus, queue: str) -> None:
    ok = ids.generate("JOB")
    with pytest.raises(ValueError, match="payload is"):
        await jobs.enqueue_many(bus, queue, [(ok, "fine"), (ids.generate("JOB"), "x" * 2**21)])
    with pytest.raises(ValueError, match="payload is"):
        await lanes.enqueue_many(
            bus, queue, "g", [(ok, "fine"), (ids.generate("JOB"), b"x" * 2**21)]
        )
    with pytest.raises(ValueError, match="run_at_ms"):
        await jobs.enqueue_at(bus, queue, "fine", 2**63, job_id=ok)  # once answered DUPLICATE
    with pytest.raises(ValueError, match="at_ms"):
        await lanes.pause_until(bus, queue, "g", 2**64)
    with pytest.raises(ValueError, match="after must be a stream id"):
        await events.read(bus, queue, after="bogus")
    assert not (await jobs.counts(bus, queue)).exists
    assert await jobs.get_job(bus, queue, ok) is None
    assert await events.read(bus, queue) == []


async def test_the_latest_times_are_kept_exactly(bus: Bus, queue: str) -> None:
    a, b = ids.generate("JOB"), ids.generate("JOB")
    got = await jobs.enqueue_at(bus, queue, "far", MAX_TIME_MS, job_id=a)
    assert got.run_at_ms == MAX_TIME_MS
    info = await jobs.get_job(bus, queue, a)
    assert info is not None and info.score_ms == MAX_TIME_MS
    before = await bus.transport.server_time_ms()
    got = await jobs.enqueue_in(bus, queue, "far", MAX_DELAY_MS, job_id=b)
    after = await bus.transport.server_time_ms()
    assert got.run_at_ms is not None
    assert before + MAX_DELAY_MS <= got.run_at_ms <= after + MAX_DELAY_MS
    info = await jobs.get_job(bus, queue, b)
    assert info is not None and info.score_ms == got.run_at_ms


async def test_the_payload_limit_is_the_bus_s(server_url: str, queue: str) -> None:
    async with open_bus(server_url) as bus:
        assert bus.max_payload_bytes == DEFAULT_MAX_PAYLOAD_BYTES
        a = ids.generate("JOB")
        assert (
            await jobs.enqueue(bus, queue, b"\0" * DEFAULT_MAX_PAYLOAD_BYTES, job_id=a)
        ).outcome == "enqueued"
        info = await jobs.get_job(bus, queue, a)
        assert info is not None and len(info.payload) == DEFAULT_MAX_PAYLOAD_BYTES
        with pytest.raises(ValueError, match=f"limit of {DEFAULT_MAX_PAYLOAD_BYTES} bytes"):
            await jobs.enqueue(bus, queue, b"\0" * (2**20 + 1))
    async with open_bus(server_url, max_payload_bytes=10) as small:
        assert (await lanes.enqueue(small, queue, "g", "x" * 10)).outcome == "enqueued"
        with pytest.raises(ValueError, match="payload is 11 bytes, over the bus's limit of 10"):
            await lanes.enqueue(small, queue, "g", "x" * 11)


EAST = dt.timezone(dt.timedelta(hours=23))  # the datetime type's extreme offsets (almost)
WEST = dt.timezone(-dt.timedelta(hours=23))


@pytest.mark.parametrize(
    ("value", "absolute", "ms"),
    [
        (5, True, 5),
        (1000.0, True, 1000),
        (1000.001, True, 1001),  # rounded up: never early
        (-0.5, False, 0),
        (dt.datetime(1970, 1, 1, 0, 0, 1, 1, tzinfo=dt.UTC), True, 1001),
        (dt.datetime(1970, 1, 1, 1, 0, 1, tzinfo=dt.timezone(dt.timedelta(hours=1))), True, 1000),
        (dt.timedelta(microseconds=1500), False, 2),
        (dt.timedelta(seconds=3), False, 3000),
        (dt.datetime.max.replace(tzinfo=dt.UTC), True, 253402300800000),  # 10000-01-01
        (dt.datetime.max.replace(tzinfo=WEST), True, 253402383600000),
    ],
)
def test_times_and_delays_in_whole_ms_rounded_up(value: Any, absolute: bool, ms: int) -> None:
    assert check_when("t", value, absolute=absolute) == ms


@pytest.mark.parametrize(
    ("value", "absolute", "error", "message"),
    [
        (dt.datetime(2030, 1, 1), True, ValueError, "naive datetime: give it a time zone"),
        (float("nan"), True, ValueError, "finite"),
        (float("inf"), False, ValueError, "finite"),
        (-1.5, True, ValueError, ">= 0"),
        (dt.datetime(1969, 12, 31, tzinfo=dt.UTC), True, ValueError, ">= 0"),
        (dt.timedelta(seconds=1), True, TypeError, "must be an int"),  # a delay is no time
        (dt.datetime(2030, 1, 1, tzinfo=dt.UTC), False, TypeError, "must be an int"),
        ("5", True, TypeError, "must be an int"),
        (True, False, TypeError, "must be an int"),
        (float(MAX_TIME_MS) * 2, True, ValueError, "at most"),
        # the extremes of the types: ValueError naming the limit, never OverflowError
        (dt.timedelta.max, False, ValueError, "t must be at most 8998403161718784 "),
        (dt.timedelta.min, False, ValueError, "t must be >= 0, got -86399999913600000$"),
        (dt.datetime.min.replace(tzinfo=dt.UTC), True, ValueError, "t must be >= 0"),
        (dt.datetime.min.replace(tzinfo=EAST), True, ValueError, "t must be >= 0"),
        (1e300, True, ValueError, r"at most 9007199254740992 .*, got 1\.000e\+300$"),
        (-1e300, False, ValueError, r">= 0, got -1\.000e\+300$"),
        (10**30, False, ValueError, r"got 1\.000e\+30$"),
    ],
)
def test_bad_times_are_refused(value: Any, absolute: bool, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        check_when("t", value, absolute=absolute)


OFFSETS = st.timedeltas(min_value=-dt.timedelta(hours=23, minutes=59),
                        max_value=dt.timedelta(hours=23, minutes=59))  # fmt: skip


@given(
    st.one_of(
        st.timedeltas().map(lambda d: (d, False)),
        st.datetimes(timezones=OFFSETS.map(dt.timezone)).map(lambda t: (t, True)),
        st.floats().map(lambda f: (f, bool(int(f) % 2) if math.isfinite(f) else True)),
    )
)
def test_any_time_or_delay_is_whole_ms_or_a_value_error(case: tuple[Any, bool]) -> None:
    """Every timedelta, every aware datetime and every float, however extreme: whole ms within
    the limits, or ValueError naming the argument."""
    value, absolute = case
    try:
        ms = check_when("when", value, absolute=absolute)
    except ValueError as exc:
        assert str(exc).startswith("when ")
    else:
        assert 0 <= ms <= (MAX_TIME_MS if absolute else MAX_DELAY_MS)


async def test_enqueue_at_takes_float_ms_and_aware_datetimes(bus: Bus, queue: str) -> None:
    at = dt.datetime(2100, 1, 1, 0, 0, 0, 250, tzinfo=dt.UTC)
    got = await jobs.enqueue_at(bus, queue, "x", at)
    assert got.run_at_ms == 4102444800001
    got = await jobs.enqueue_at(bus, queue, "x", 4102444800000.5)
    assert got.run_at_ms == 4102444800001
    before = await bus.transport.server_time_ms()
    got = await jobs.enqueue_in(bus, queue, "x", dt.timedelta(hours=1))
    assert got.run_at_ms is not None and got.run_at_ms >= before + 3_600_000
    with pytest.raises(ValueError, match="naive"):
        await jobs.enqueue_at(bus, queue, "x", dt.datetime(2100, 1, 1))
    assert (await jobs.counts(bus, queue)).scheduled == 3
