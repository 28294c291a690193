"""The shares of a partitioned queue's cap (pure, ``echomq_trio._cap_shares``): the shares add up
to the total, meet every need the total allows and are max-min fair; a round's lowers and raises
never let the partitions hold more than the total."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from echomq_trio._cap_shares import held, lowers, raises, targets

counts = st.lists(st.integers(0, 30), min_size=1, max_size=8)


@st.composite
def demand(draw: st.DrawFn) -> tuple[int, list[int], list[int]]:
    active = draw(counts)
    waiting = draw(st.lists(st.integers(0, 30), min_size=len(active), max_size=len(active)))
    return draw(st.integers(0, 120)), active, waiting


@given(demand())
def test_shares_add_up_meet_the_needs_the_total_allows_and_are_fair(
    d: tuple[int, list[int], list[int]],
) -> None:
    total, active, waiting = d
    shares = targets(total, active, waiting)
    need = [a + w for a, w in zip(active, waiting, strict=True)]
    assert sum(shares) == total and min(shares) >= 0
    if total >= sum(need):
        assert all(s >= n for s, n in zip(shares, need, strict=True)), "every need met"
        spare = [s - n for s, n in zip(shares, need, strict=True)]
        assert max(spare) - min(spare) <= 1, "what no partition needs is spread evenly"
    unmet = [i for i, (s, n) in enumerate(zip(shares, need, strict=True)) if s < n]
    for i in unmet:
        # max-min fair: nobody gets more than an unmet partition plus a rounding unit, and no
        # share goes past its need while a need is unmet
        assert all(s <= shares[i] + 1 for s in shares), (shares, need)
        assert all(s <= n for s, n in zip(shares, need, strict=True)), (shares, need)


@given(demand())
def test_equal_inputs_give_equal_shares(d: tuple[int, list[int], list[int]]) -> None:
    assert targets(*d) == targets(*d)


def test_fixed_values() -> None:
    assert targets(4, [0, 0, 0], [0, 0, 0]) == [2, 1, 1]
    assert targets(4, [0, 0, 0], [0, 20, 0]) == [0, 4, 0]
    assert targets(4, [4, 0, 0], [0, 3, 0]) == [2, 2, 0]
    assert targets(10, [1, 0, 0], [0, 2, 30]) == [1, 2, 7]
    assert targets(2, [0, 0, 0], [0, 0, 0]) == [1, 1, 0]  # a share of 0: claims lease nothing
    with pytest.raises(ValueError, match="equally long"):
        targets(4, [1], [1, 2])
    with pytest.raises(ValueError, match=">= 0"):
        targets(-1, [1], [1])


@st.composite
def reading(draw: st.DrawFn) -> tuple[int, list[int | None], list[int], list[int]]:
    total, active, waiting = draw(demand())
    caps = draw(st.lists(st.none() | st.integers(0, 40), min_size=len(active),
                         max_size=len(active)))  # fmt: skip
    return total, caps, active, waiting


@given(reading())
def test_a_round_s_lowers_and_raises_never_grow_what_is_held_past_the_total(
    r: tuple[int, list[int | None], list[int], list[int]],
) -> None:
    total, caps, active, waiting = r
    shares = targets(total, active, waiting)
    low = lowers(caps, shares)
    after = [c if c is not None else old for c, old in zip(low, caps, strict=True)]
    for old, new, s in zip(caps, low, shares, strict=True):
        if new is None:
            assert old is not None and old <= s, "a cap at or under its share stays"
        else:
            assert new == s and (old is None or old > s)
    heights = [held(c, a) for c, a in zip(after, active, strict=True)]
    assert all(h is not None for h in heights)
    before = sum(h for h in heights if h is not None)
    up = raises(total, after, active, waiting, shares)
    final = [c if c is not None else old for c, old in zip(up, after, strict=True)]
    grown = sum(max(c, a) for c, a in zip(final, active, strict=True) if c is not None)
    assert grown <= max(total, before), "a raise spends only the room the total leaves"
    for old, new, s in zip(after, up, shares, strict=True):
        assert new is None or (old is not None and old < new <= s)
    if before + sum(max(0, s - max(c or 0, a)) for c, a, s
                    in zip(after, active, shares, strict=True)) <= total:  # fmt: skip
        assert all(c is not None and c >= s for c, s in zip(final, shares, strict=True)), (
            "with room for every share, every cap reaches its share"
        )


def test_nothing_is_raised_while_a_cap_is_missing() -> None:
    assert raises(4, [None, 0], [0, 0], [0, 5], [0, 4]) == [None, None]
