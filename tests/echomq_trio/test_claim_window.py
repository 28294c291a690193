"""``ClaimWindow``: the claim batch doubles while claims come back full, halves while short.
``HoldAhead``: the jobs held ahead follow the handlers' pace."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from echomq_trio._claim_window import ClaimWindow, HoldAhead


def test_grows_on_full_claims_and_shrinks_on_short_ones() -> None:
    w = ClaimWindow(least=20, most=138)
    assert w.size == 20
    sizes = []
    for _ in range(4):
        w.claimed(w.size, w.size)
        sizes.append(w.size)
    assert sizes == [40, 80, 138, 138]
    w.claimed(138, 10)
    assert w.size == 69
    w.claimed(69, 0)
    w.claimed(34, 0)
    assert w.size == 20  # never below least


def test_a_claim_limited_by_room_does_not_grow_it() -> None:
    w = ClaimWindow(least=10, most=100)
    w.claimed(5, 5)  # asked for fewer than the window (no room): says nothing of the backlog
    assert w.size == 10


@given(st.lists(st.tuples(st.integers(1, 300), st.integers(0, 300)), max_size=50))
def test_always_within_bounds(claims: list[tuple[int, int]]) -> None:
    w = ClaimWindow(least=7, most=90)
    for asked, got in claims:
        w.claimed(asked, min(asked, got))
        assert 7 <= w.size <= 90


def test_bad_bounds() -> None:
    with pytest.raises(ValueError):
        ClaimWindow(least=0, most=5)
    with pytest.raises(ValueError):
        ClaimWindow(least=6, most=5)


def test_holds_the_least_ahead_until_a_first_span_is_measured() -> None:
    h = HoldAhead(least=10, most=512, horizon_s=0.05, span_s=0.05)
    assert h.allowance == 10
    h.observe(0.0, 0)
    h.observe(0.01, 300)  # shorter than a span: not yet a pace
    assert h.pace is None and h.allowance == 10


def test_holds_ahead_the_handlers_work_of_a_horizon_within_bounds() -> None:
    h = HoldAhead(least=10, most=512, horizon_s=0.05, span_s=0.05)
    h.observe(0.0, 0)
    h.observe(0.1, 400)  # 4,000 jobs/s: 200 jobs in 50 ms
    assert h.pace == 4000 and h.allowance == 200
    h.observe(0.2, 2400)  # 20,000 jobs/s now: the pace halves the gap, 12,000/s
    assert h.pace == 12000 and h.allowance == 512  # capped at most
    h.observe(1.2, 2400)  # a second with nothing finished: 6,000/s
    assert h.pace == 6000 and h.allowance == 300
    for second in range(2, 12):  # slow handlers now: one job a second
        h.observe(1.2 + second, 2400 + second)
    assert h.pace is not None and h.pace < 10
    assert h.allowance == 10  # the least is kept


@given(st.lists(st.tuples(st.floats(0, 10), st.integers(0, 10_000)), max_size=50))
def test_the_allowance_stays_within_bounds(steps: list[tuple[float, int]]) -> None:
    h = HoldAhead(least=3, most=64, horizon_s=0.05, span_s=0.05)
    now, finished = 0.0, 0
    for dt, more in steps:
        now, finished = now + dt, finished + more
        h.observe(now, finished)
        assert 3 <= h.allowance <= 64


def test_bad_hold_ahead_settings() -> None:
    with pytest.raises(ValueError):
        HoldAhead(least=5, most=4, horizon_s=0.05, span_s=0.05)
    with pytest.raises(ValueError):
        HoldAhead(least=1, most=4, horizon_s=0, span_s=0.05)
