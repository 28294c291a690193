"""The settlement decision, without a server: every handler result maps to one transition."""

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from echomq_trio._checks import MAX_DELAY_MS
from echomq_trio.backoff import Exponential, Fixed, Jitter, Policy, delay_ms
from echomq_trio.errors import (
    AuthenticationFailed,
    ConnectionLost,
    OutOfMemory,
    PersistenceFailed,
    RequestTimedOut,
    ServerError,
    WritesRefused,
)
from echomq_trio.jobs import Job
from echomq_trio.settlement import (
    Ack,
    AckJob,
    Bury,
    BuryJob,
    DeferIn,
    DeferJob,
    RetryIn,
    RetryJob,
    SettlePolicy,
    decide,
    error_text,
)

POLICY = SettlePolicy(max_attempts=3, backoff=Fixed(250))


def job(attempts: int = 1) -> Job:
    return Job("q", "JOB0000000000a", b"x", attempts, token=7, lease_deadline_ms=0)


policies = st.one_of(
    st.builds(Fixed, st.integers(0, 10**6)),
    st.builds(Exponential, st.integers(0, 10**4), st.integers(0, 10**7)),
    st.builds(Jitter, st.builds(Exponential, st.integers(0, 10**4), st.integers(0, 10**7))),
)
texts = st.text(max_size=50)
delays = st.one_of(st.integers(-(10**20), 10**20), st.floats(allow_nan=False, allow_infinity=False))


def test_returning_none_or_ack_acks() -> None:
    assert decide(None, job(), POLICY) == AckJob("")
    assert decide(Ack("sent as 42"), job(), POLICY) == AckJob("sent as 42")


@given(result=st.binary(max_size=64) | st.text(max_size=64), note=texts)
def test_a_result_goes_with_the_ack_as_bytes(result: str | bytes, note: str) -> None:
    as_bytes = result.encode() if isinstance(result, str) else result
    assert decide(result, job(), POLICY) == AckJob("", as_bytes)
    assert decide(Ack(note, result=result), job(), POLICY) == AckJob(note, as_bytes)
    assert Ack(result=bytearray(as_bytes)).result == as_bytes
    assert decide(Ack(note), job(), POLICY) == AckJob(note, None)  # no result: the plain ack


def test_a_result_must_be_text_or_bytes_and_within_its_bound() -> None:
    with pytest.raises(TypeError, match="result must be str or bytes, got int"):
        Ack(result=42)  # type: ignore[arg-type]
    small = SettlePolicy(max_attempts=3, backoff=Fixed(250), max_result_bytes=4)
    assert decide("four", job(), small) == AckJob("", b"four")
    assert decide("fives", job(), small) == RetryJob(
        250, "ValueError: result of 5 bytes is over max_result_bytes (4)", 3
    )
    t = decide(42, job(), POLICY)  # type: ignore[arg-type]
    assert isinstance(t, RetryJob) and t.error == (
        "TypeError: handler returned 42; expected None, str, bytes, Ack, RetryIn, DeferIn or Bury"
    )


@given(ms=delays, reason=texts, attempts=st.integers(0, 100), most=st.integers(1, 100))
def test_retry_in_retries_after_its_own_delay(
    ms: float, reason: str, attempts: int, most: int
) -> None:
    policy = SettlePolicy(max_attempts=most, backoff=Fixed(1))
    t = decide(RetryIn(ms, reason), job(attempts), policy)
    assert t == RetryJob(RetryIn(ms).delay_ms, reason, most)
    assert (
        isinstance(t, RetryJob)
        and 0 <= t.delay_ms <= MAX_DELAY_MS
        and t.delay_ms >= min(ms, MAX_DELAY_MS)
    )


@given(ms=delays, reason=texts)
def test_defer_in_defers_without_a_limit_of_attempts(ms: float, reason: str) -> None:
    t = decide(DeferIn(ms, reason), job(), POLICY)
    assert t == DeferJob(DeferIn(ms).delay_ms, reason)


@given(reason=texts)
def test_bury_buries(reason: str) -> None:
    assert decide(Bury(reason), job(), POLICY) == BuryJob(reason)


@given(policy=policies, attempts=st.integers(0, 200), seed=st.integers(), message=texts)
def test_a_raised_exception_retries_after_the_backoff_for_the_attempt_with_its_text(
    policy: Policy, attempts: int, seed: int, message: str
) -> None:
    settle = SettlePolicy(max_attempts=5, backoff=policy, rng=random.Random(seed))
    t = decide(ValueError(message), job(attempts), settle)
    assert isinstance(t, RetryJob)
    assert (t.error, t.max_attempts) == (f"ValueError: {message}", 5)
    # The same draw again: the decision is a function of its inputs, rng included.
    assert t.delay_ms == delay_ms(policy, max(attempts, 1), random.Random(seed))
    bound = policy.inner if isinstance(policy, Jitter) else policy
    assert 0 <= t.delay_ms <= delay_ms(bound, max(attempts, 1))


@pytest.mark.parametrize(
    "failure",
    [
        PersistenceFailed("MISCONF Errors writing to the AOF file: No space left on device"),
        OutOfMemory("OOM command not allowed"),
        WritesRefused("READONLY You can't write against a read only replica"),
    ],
)
def test_refused_writes_in_a_handler_defer_the_job_without_spending_its_attempt(
    failure: Exception,
) -> None:
    """The handler's own call to the bus was refused (a full disk, the memory ceiling, a
    failover): the server takes writes again by itself, and the job did not fail."""
    t = decide(failure, job(2), POLICY)
    assert t == DeferJob(250, f"the bus failed: {error_text(failure)}")


@pytest.mark.parametrize(
    "failure",
    [
        ServerError("ERR wrong number of arguments"),
        ConnectionLost("connection reset"),
        AuthenticationFailed("WRONGPASS"),
        RequestTimedOut("no answer in 5000 ms"),
    ],
)
def test_other_failures_of_the_bus_are_the_attempt_s(failure: Exception) -> None:
    """A failure that may last (refused credentials, a call that always times out) spends the
    attempt, so it ends in the dead set instead of deferrals forever."""
    assert isinstance(decide(failure, job(2), POLICY), RetryJob)


def test_the_backoff_counts_the_attempt_that_failed() -> None:
    policy = SettlePolicy(max_attempts=9, backoff=Exponential(100, 10_000))
    waits = [decide(RuntimeError("x"), job(a), policy) for a in (1, 2, 3, 4)]
    assert [w.delay_ms for w in waits if isinstance(w, RetryJob)] == [100, 200, 400, 800]


@pytest.mark.parametrize("odd", [0, Ack, [None], bytearray(b"x")])
def test_an_unexpected_return_counts_as_the_handler_s_error(odd: object) -> None:
    t = decide(odd, job(2), POLICY)  # type: ignore[arg-type]
    assert t == RetryJob(
        250,
        f"TypeError: handler returned {odd!r}; expected None, str, bytes, Ack, RetryIn, DeferIn "
        "or Bury",
        3,
    )


def test_error_text_names_the_type_and_the_message() -> None:
    assert error_text(KeyError("chat")) == "KeyError: 'chat'"
    assert error_text(RuntimeError()) == "RuntimeError: "


def test_decisions_are_values() -> None:
    # Frozen and comparable: a decision can be logged, compared and put in a set.
    assert len({AckJob(), AckJob(""), BuryJob("x"), BuryJob("x")}) == 2
    with pytest.raises(AttributeError):
        RetryJob(1, "e", 3).delay_ms = 5  # type: ignore[misc]
