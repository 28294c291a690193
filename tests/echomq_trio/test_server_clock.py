"""``_server_clock.ServerClock``, pure: the server's lead from readings taken after each call was
sent is their least upper bound, so a time it places is never after the true one (the server
moves nothing early, so that side only costs a beat) and is before it by no more than the
quickest recent call's way out; a step of the server's clock is met at the first reading after
it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from echomq_trio._server_clock import DRIFT, KEEP, WINDOW_S, ServerClock

OFFSET_S = 1_796_198_072.786  # the server's clock less the local one (as on a real host)


def _reading(sent: float, way_out: float, drift: float = 0.0) -> float:
    """The server's ms when a call sent at local ``sent`` got there after ``way_out`` s."""
    return (sent + way_out + OFFSET_S + drift * (sent + way_out)) * 1000


@settings(deadline=None)  # pure and quick; a loaded machine is not its fault
@given(
    calls=st.lists(
        st.tuples(
            st.floats(0.0, 0.03),  # the time since the last call (s)
            st.floats(0.0, 0.002),  # its way out (s)
        ),
        min_size=1,
        max_size=60,
    ),
    ahead_ms=st.floats(0.0, 50.0),
    drift=st.floats(-DRIFT, DRIFT),
)
def test_a_time_is_placed_no_later_than_it_comes_and_early_by_the_quickest_way_out_at_most(
    calls: list[tuple[float, float]], ahead_ms: float, drift: float
) -> None:
    clock = ServerClock()
    sent, kept = 0.0, []
    for gap, way_out in calls:
        sent += gap
        clock.observe(sent, sent + 2 * way_out, _reading(sent, way_out, drift))
        kept.append((sent, way_out))
    now = sent + 0.001
    target_ms = _reading(now, 0.0) + ahead_ms  # a time the server's clock reaches later
    placed = clock.local_time_of(target_ms, now)
    assert placed is not None
    truth = (target_ms / 1000 - OFFSET_S) / (1 + drift)  # when the server's clock reads it
    # never after it (but for the drift from now until then: 5 µs in 50 ms)
    assert placed <= truth + DRIFT * (truth - now) + 1e-6
    recent = [(s, w) for s, w in kept if now - s <= WINDOW_S][-KEEP:] or kept[-1:]
    slack = min(w + 2 * DRIFT * (now - s) for s, w in recent) + DRIFT * (truth - now)
    assert truth - placed <= slack + 1e-6


def test_the_quickest_recent_call_places_the_time_not_the_last() -> None:
    clock = ServerClock()
    clock.observe(0.000, 0.0002, _reading(0.000, 0.0001))  # quick: 0.1 ms out
    clock.observe(0.010, 0.0112, _reading(0.010, 0.0009))  # slow: 0.9 ms out (a server asleep)
    target = _reading(0.030, 0.0)
    placed = clock.local_time_of(target, 0.011)
    assert placed == pytest.approx(0.030 - 0.0001 - DRIFT * 0.011, abs=1e-6)


def test_readings_older_than_the_window_go_but_the_last() -> None:
    clock = ServerClock()
    assert clock.local_time_of(1_000.0, 0.0) is None
    clock.observe(0.0, 0.0, _reading(0.0, 0.0))  # exact, but old by the time it is asked
    clock.observe(0.5, 0.501, _reading(0.5, 0.0005))
    target = _reading(3.0, 0.0)
    # within the window the exact one wins (grown by its drift)
    assert clock.local_time_of(target, 0.9) == pytest.approx(3.0 - DRIFT * 0.9, abs=1e-6)
    # past it, the other one places it, and once alone it is kept whatever its age
    assert clock.local_time_of(target, 1.2) == pytest.approx(3.0 - 0.0005 - DRIFT * 0.7, abs=1e-6)
    assert clock.local_time_of(target, 60.0) == pytest.approx(3.0 - 0.0005 - DRIFT * 59.5)


def test_a_step_of_the_server_clock_is_met_at_the_first_reading_after_it() -> None:
    clock = ServerClock()
    clock.observe(0.0, 0.0002, _reading(0.0, 0.0001))
    target = _reading(0.3, 0.0)
    # back 5 ms: the next reading's bound is the least at once
    clock.observe(0.1, 0.1002, _reading(0.1, 0.0001) - 5)
    assert clock.local_time_of(target, 0.11) == pytest.approx(0.3 + 0.005 - 0.0001, abs=2e-5)
    # ahead 8 ms (3 ms past where it was): the bounds kept would place it 3 ms late; dropped
    clock.observe(0.2, 0.2002, _reading(0.2, 0.0001) + 3)
    assert clock.local_time_of(target, 0.21) == pytest.approx(0.3 - 0.003 - 0.0001, abs=2e-5)
    # a slow call is no step: its answer came after the server could have read the bound
    clock.observe(0.25, 0.2520, _reading(0.25, 0.0010) + 3)
    assert clock.local_time_of(target, 0.26) == pytest.approx(0.3 - 0.003 - 0.0001, abs=2e-5)
