import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from echomq_trio import ids

NS = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ", min_size=3, max_size=3)


@given(NS)
def test_generated_ids_are_valid_and_branded(ns: str) -> None:
    value = ids.generate(ns)
    assert len(value) == 14 and value[:3] == ns
    assert re.fullmatch(r"[A-Z]{3}[0-9A-Za-z]{11}", value)
    assert ids.is_valid(value) and ids.is_valid(value, ns)
    assert ids.namespace(value) == ns


def test_ids_strictly_increase_within_a_process_even_in_bursts() -> None:
    minted = [ids.generate("JOB") for _ in range(20_000)]  # > 4096 per ms carries into ts
    assert minted == sorted(minted)
    assert len(set(minted)) == len(minted)


@given(st.lists(st.integers(min_value=ids.EPOCH_MS, max_value=ids.EPOCH_MS + 2**40), min_size=2))
def test_a_clock_that_steps_back_keeps_counting_up(clock: list[int]) -> None:
    minter = ids.IdMinter(node=7)
    minted = [minter.generate("NOT", now_ms=t) for t in clock]
    assert minted == sorted(minted) and len(set(minted)) == len(minted)


@given(
    st.lists(st.integers(min_value=ids.EPOCH_MS, max_value=ids.EPOCH_MS + 2**41 - 1), min_size=1),
    st.integers(0, 1023),
    st.integers(1, 5000),
)
def test_each_id_is_its_snowflake_in_full_whatever_the_minter_kept(
    clock: list[int], node: int, burst: int
) -> None:
    # A minter keeps the high digits of its last id; every id must still be its whole value's
    # (a burst of over 4096 in one ms, and the last four digits' carry, included).
    minter = ids.IdMinter(node=node)
    for t in clock:
        for _ in range(burst if t == clock[0] else 1):
            value = minter.generate("JOB", now_ms=t)
            last = minter._last
            assert value == "JOB" + ids._encode((last >> 12) << 22 | node << 12 | (last & 0xFFF))


@given(st.integers(min_value=ids.EPOCH_MS, max_value=ids.EPOCH_MS + 2**41 - 1))
def test_timestamp_round_trips(now: int) -> None:
    value = ids.IdMinter(node=1023).generate("USR", now_ms=now)
    assert ids.timestamp_ms(value) == now


TIMES = st.integers(min_value=ids.EPOCH_MS, max_value=ids.EPOCH_MS + 2**41 - 1)


@given(TIMES, st.integers(0, 1023), TIMES, st.integers(0, 1023))
def test_text_order_is_time_then_node_order_over_the_whole_range(
    t1: int, n1: int, t2: int, n2: int
) -> None:
    a = ids.IdMinter(node=n1).generate("JOB", now_ms=t1)
    b = ids.IdMinter(node=n2).generate("JOB", now_ms=t2)
    assert ids.is_valid(a, "JOB") and ids.is_valid(b, "JOB")
    assert (a < b) == ((t1, n1) < (t2, n2)) and (a == b) == ((t1, n1) == (t2, n2))


def test_timestamp_of_a_fresh_id_is_now() -> None:
    import time

    before = time.time_ns() // 1_000_000
    value = ids.generate("JOB")
    assert before - 5 <= ids.timestamp_ms(value) <= time.time_ns() // 1_000_000 + 5


@pytest.mark.parametrize("ns", ["", "AB", "ABCD", "abc", "A1C", None, 123])
def test_bad_namespace_is_refused(ns: object) -> None:
    with pytest.raises(ValueError, match="namespace"):
        ids.generate(ns)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "value",
    [
        "",
        "JOB",
        "JOB0000000000",
        "JOB00000000000x",
        "job0KHTOWnGLuC",
        "JOB0KHTOWnGL-C",
        42,
        None,
        "JOBzzzzzzzzzzz",
    ],  # the last sorts after 2**63-1
)
def test_malformed_ids_are_invalid(value: object) -> None:
    assert not ids.is_valid(value)
    if isinstance(value, str):
        with pytest.raises(ValueError):
            ids.timestamp_ms(value)


def test_largest_snowflake_is_valid_and_one_past_is_not() -> None:
    assert ids.is_valid("JOBAzL8n0Y58m7")
    assert not ids.is_valid("JOBAzL8n0Y58m8")


def test_namespace_filter() -> None:
    assert not ids.is_valid(ids.generate("NOT"), "JOB")


def test_node_must_fit_ten_bits() -> None:
    with pytest.raises(ValueError):
        ids.IdMinter(node=1024)
