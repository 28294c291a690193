import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from echomq_trio.backoff import Exponential, Fixed, Jitter, delay_ms, reconnect_delay_s


def test_fixed() -> None:
    assert [delay_ms(Fixed(250), a) for a in (1, 2, 10)] == [250, 250, 250]


def test_exponential_doubles_then_caps() -> None:
    policy = Exponential(100, 10_000)
    assert [delay_ms(policy, a) for a in (1, 2, 3, 4)] == [100, 200, 400, 800]
    assert delay_ms(policy, 20) == 10_000
    assert delay_ms(policy, 10_000) == 10_000


@given(
    base=st.integers(0, 10_000),
    cap=st.integers(0, 100_000),
    attempts=st.integers(1, 200),
    seed=st.integers(),
)
def test_full_jitter_stays_within_zero_and_the_inner_delay(
    base: int, cap: int, attempts: int, seed: int
) -> None:
    inner = Exponential(base, cap)
    d = delay_ms(Jitter(inner), attempts, random.Random(seed))
    assert 0 <= d <= delay_ms(inner, attempts) <= cap


def test_jitter_of_zero_is_zero() -> None:
    assert delay_ms(Jitter(Fixed(0)), 3) == 0


def test_jitter_spreads() -> None:
    rng = random.Random(1)
    draws = {delay_ms(Jitter(Fixed(1000)), 1, rng) for _ in range(200)}
    assert len(draws) > 100 and min(draws) < 100 and max(draws) > 900


@pytest.mark.parametrize("attempts", [0, -1, 1.5, None])
def test_attempts_must_be_positive_int(attempts: object) -> None:
    with pytest.raises(ValueError):
        delay_ms(Fixed(1), attempts)  # type: ignore[arg-type]


def test_negative_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        Fixed(-1)
    with pytest.raises(ValueError):
        Exponential(100, -5)


def test_the_bus_waits_a_tenth_of_a_second_doubling_to_one_between_tries() -> None:
    assert [reconnect_delay_s(n) for n in range(1, 7)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert reconnect_delay_s(10**6) == 1.0
    with pytest.raises(ValueError):
        reconnect_delay_s(0)
