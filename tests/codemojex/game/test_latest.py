"""``Latest``, the feed's one-slot mailbox, in virtual time (``MockClock(autojump_threshold=0)``
through pytest-trio's ``autojump_clock``): time is the logic here, so no real waiting."""

import trio
import trio.testing

from codemojex.game.latest import Latest


async def test_a_slow_reader_gets_the_newest_value_never_a_backlog(
    autojump_clock: trio.testing.MockClock,
) -> None:
    box: Latest[int] = Latest()
    taken: list[tuple[float, int]] = []
    put_at: dict[int, float] = {}

    async def writer() -> None:
        for n in range(100):  # one value every 10 ms for a second
            put_at[n] = trio.current_time()
            box.put(n)
            await trio.sleep(0.010)

    async def reader() -> None:
        while True:
            value = await box.get()
            taken.append((trio.current_time(), value))
            if value == 99:
                return
            await trio.sleep(0.035)  # three times slower than the writer

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer)
        nursery.start_soon(reader)
    values = [v for _, v in taken]
    assert values == sorted(set(values)) and values[-1] == 99  # in order, none twice
    assert 28 <= len(values) <= 31  # about one in 3.5: the rest were replaced, not queued
    for when, value in taken:  # each value taken was the newest when it was taken
        newer = [n for n, t in put_at.items() if n > value and t < when]  # same instant: either
        assert not newer, (when, value, newer)
    assert trio.current_time() - start < 1.1  # the reader kept up with the newest


async def test_put_never_blocks_and_says_whether_it_replaced(
    autojump_clock: trio.testing.MockClock,
) -> None:
    box: Latest[str] = Latest()
    assert box.put("a") is False
    assert box.put("b") is True  # "a" was never taken
    assert await box.get() == "b"
    with trio.move_on_after(5) as waited:  # nothing new: get waits (5 virtual seconds, no more)
        await box.get()
    assert waited.cancelled_caught
