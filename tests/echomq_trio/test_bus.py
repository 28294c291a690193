"""``Bus.command``: a typed raw command on the bus's connection."""

import pytest

from echomq_trio import Bus

pytestmark = pytest.mark.cluster


async def test_raw_commands_take_numbers_and_answer_typed_replies(bus: Bus, queue: str) -> None:
    key = bus.keys(queue).app("raw")
    assert await bus.command("HSET", key, "n", 7, "f", 0.5) == 2
    assert await bus.command("HINCRBY", key, "n", 1) == 8
    assert await bus.command("HGET", key, "f") == b"0.5"
    assert await bus.command("HMGET", key, "n", "missing") == [b"8", None]
    assert await bus.command("DEL", key) == 1


async def test_a_bool_or_another_type_is_refused_before_any_io(bus: Bus, queue: str) -> None:
    key = bus.keys(queue).app("raw")
    for bad in (True, None, [1]):
        with pytest.raises(TypeError, match="command argument"):
            await bus.command("SET", key, bad)  # type: ignore[arg-type]
    assert await bus.command("EXISTS", key) == 0
