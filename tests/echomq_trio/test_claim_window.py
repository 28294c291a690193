"""``ClaimWindow``: the claim batch doubles while claims come back full, halves while short."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from echomq_trio.claim_window import ClaimWindow


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
