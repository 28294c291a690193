"""``_partition_meta.each``: a partitioned queue's calls to every partition at once, and what a
caller sees when one fails or when it is cancelled as one fails."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from echomq_trio._partition_meta import each
from echomq_trio.errors import BusError


async def test_answers_come_in_the_order_of_the_calls() -> None:
    async def after(delay: float, answer: int) -> int:
        await trio.sleep(delay)
        return answer

    calls = [lambda: after(0.03, 0), lambda: after(0.0, 1), lambda: after(0.01, 2)]
    assert await each(calls) == [0, 1, 2]


async def test_the_first_error_is_raised_as_itself_with_the_others_as_its_cause() -> None:
    async def fails(text: str) -> int:
        raise BusError(text)

    with pytest.raises(BusError, match="one") as alone:
        await each([lambda: fails("one")])
    assert alone.value.__cause__ is None
    with pytest.raises(BusError) as first:
        await each([lambda: fails("a"), lambda: fails("b")])
    assert isinstance(first.value.__cause__, BaseExceptionGroup)
    assert {str(e) for e in first.value.__cause__.exceptions} == {"a", "b"}


async def test_a_caller_cancelled_as_a_call_fails_is_cancelled_not_failed() -> None:
    started = trio.Event()

    async def waits() -> int:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def fails_when_cancelled() -> int:
        try:
            started.set()
            await trio.sleep_forever()
        except trio.Cancelled:
            raise BusError("connection closed as the call was cancelled") from None
        raise AssertionError("unreachable")

    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:

            async def cancel_once_started() -> None:
                await started.wait()
                scope.cancel()

            nursery.start_soon(cancel_once_started)
            await each([waits, fails_when_cancelled])
    assert scope.cancelled_caught  # the stop ended the scope; no BusError escaped it
