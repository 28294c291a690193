"""The trio transport's cluster routing without a server: slots of keys and hash tags, the key
of a raw command, the slot map's reply, and ``MOVED``/``ASK``/``TRYAGAIN`` against fake nodes
on trio memory streams (time is a ``MockClock``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import attrs
import hiredis
import pytest
import trio
import trio.testing

from echomq_trio.errors import ConnectionLost
from echomq_trio.resp._cluster import (
    REFRESH_EVERY_S,
    ClusterTransport,
    command_key,
    key_slot,
    parse_slots,
)
from echomq_trio.wire import ConnectionSpec, parse_url

A, B = ("a", 1), ("b", 2)
SPEC = parse_url("redis://a:1,b:2?timeout_ms=1000")


def test_key_slots_are_redis_crc16_of_the_hash_tag() -> None:
    assert key_slot("foo") == 12182  # the values of the cluster specification
    assert key_slot("123456789") == 0x31C3 % 16384
    assert key_slot("{user1000}.following") == key_slot("{user1000}.followers")
    assert key_slot("emq:{q}:pending") == key_slot("emq:{q}:job:1") == key_slot(b"q")
    assert key_slot("foo{}{bar}") == key_slot(b"foo{}{bar}")  # an empty tag: the whole key
    assert key_slot("foo{{bar}}zap") == key_slot("{bar")


@pytest.mark.parametrize(
    ("args", "key"),
    [
        (("GET", "k"), "k"),
        (("HSET", "h", "f", "v"), "h"),
        ((b"ping",), None),
        (("TIME",), None),
        (("SCRIPT", "FLUSH"), None),
        (("EVALSHA", "abc", "2", "k1", "k2", "arg"), "k1"),
        (("EVAL", "return 1", "0"), None),
        (("OBJECT", "ENCODING", "k"), "k"),
        (("XINFO", "STREAM", "s"), "s"),
        (("PUBLISH", "c", "m"), None),
    ],
)
def test_the_key_a_command_is_routed_by(args: tuple[str | bytes, ...], key: object) -> None:
    assert command_key(args) == key


def test_the_slot_map_reply_names_each_slots_primary() -> None:
    reply = [
        [0, 1, [b"10.0.0.1", 7000, b"id1"], [b"10.0.0.2", 7001, b"id2"]],
        [2, 16383, [b"", 7002, b"id3"]],
    ]
    slots = parse_slots(reply, ("seed", 9))
    assert slots[0] == slots[1] == ("10.0.0.1", 7000)
    assert slots[2] == slots[16383] == ("seed", 7002)  # no host: the node asked


@attrs.define(eq=False)
class FakeNode:
    """A cluster node: ``answer(request, previous)`` gives the reply's bytes; every request read
    is in ``seen``."""

    answer: Callable[[list[bytes], list[bytes] | None], bytes]
    seen: list[list[bytes]] = attrs.Factory(list)

    async def serve(self, stream: trio.abc.Stream) -> None:
        reader = hiredis.Reader()
        previous: list[bytes] | None = None
        while data := await stream.receive_some(4096):
            reader.feed(data)
            while (request := reader.gets()) is not False:
                self.seen.append(request)
                await stream.send_all(self.answer(request, previous))
                previous = request


def _slots(owner: tuple[str, int]) -> bytes:
    host = owner[0].encode()
    return b"*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$%d\r\n%s\r\n:%d\r\n" % (len(host), host, owner[1])


def _bulk(value: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(value), value)


@asynccontextmanager
async def cluster(nodes: dict[tuple[str, int], FakeNode]) -> AsyncIterator[ClusterTransport]:
    async with trio.open_nursery() as nursery:

        async def connect(spec: ConnectionSpec) -> trio.abc.Stream:
            ours, theirs = trio.testing.memory_stream_pair()
            nursery.start_soon(nodes[spec.hosts[0]].serve, theirs)
            return ours

        t = ClusterTransport(SPEC, nursery, connect=connect)
        await t._refresh()
        yield t
        await t.aclose()
        nursery.cancel_scope.cancel()


def _name(request: list[bytes]) -> bytes:
    return request[0].upper()


async def test_moved_is_followed_and_the_map_learns_the_new_owner(
    autojump_clock: trio.testing.MockClock,
) -> None:
    k_slot = key_slot("k")
    moved = {"done": False}

    def a(request: list[bytes], _: object) -> bytes:
        if _name(request) == b"CLUSTER":
            return _slots(B) if moved["done"] else _slots(A)
        moved["done"] = True
        return b"-MOVED %d b:2\r\n" % k_slot

    def b(request: list[bytes], _: object) -> bytes:
        if _name(request) == b"CLUSTER":
            return _slots(B)
        return _bulk(b"from b")

    nodes = {A: FakeNode(a), B: FakeNode(b)}
    async with cluster(nodes) as t:
        assert await t.command("GET", "k") == b"from b"
        assert await t.command("GET", "k") == b"from b"
        await trio.sleep(REFRESH_EVERY_S)  # a stale map is read again at most this often
        assert await t.command("GET", "other") == b"from b"  # the map was read again
    gets_on_a = [r for r in nodes[A].seen if _name(r) == b"GET"]
    assert gets_on_a == [[b"GET", b"k"]]  # asked once; every later call went to b


async def test_ask_sends_the_call_once_behind_asking_and_keeps_the_map() -> None:
    def a(request: list[bytes], _: object) -> bytes:
        if _name(request) == b"CLUSTER":
            return _slots(A)
        if request[1] == b"migrating":
            return b"-ASK %d b:2\r\n" % key_slot("migrating")
        return _bulk(b"from a")

    def b(request: list[bytes], previous: list[bytes] | None) -> bytes:
        if _name(request) == b"ASKING":
            return b"+OK\r\n"
        if previous is not None and _name(previous) == b"ASKING":
            return _bulk(b"from b")
        return b"-MOVED %d a:1\r\n" % key_slot(request[1])

    nodes = {A: FakeNode(a), B: FakeNode(b)}
    async with cluster(nodes) as t:
        assert await t.command("GET", "migrating") == b"from b"
        assert await t.command("GET", "stays") == b"from a"
    assert [_name(r) for r in nodes[B].seen] == [b"ASKING", b"GET"]


async def test_tryagain_is_tried_again_until_the_request_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tries = {"n": 0}

    def a(request: list[bytes], _: object) -> bytes:
        if _name(request) == b"CLUSTER":
            return _slots(A)
        tries["n"] += 1
        if request[1] == b"busy" or tries["n"] < 3:
            return b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n"
        return _bulk(b"done")

    async with cluster({A: FakeNode(a), B: FakeNode(a)}) as t:
        assert await t.command("GET", "k") == b"done"
        assert tries["n"] == 3
        start = trio.current_time()
        with pytest.raises(ConnectionLost, match=r"^TRYAGAIN"):
            await t.command("GET", "busy")
        assert 1.0 <= trio.current_time() - start < 1.5
