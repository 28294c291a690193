"""The transports against real servers: scripts the server has lost (``SCRIPT FLUSH`` and
``FUNCTION FLUSH`` here; a restart in test_restart.py) are loaded again by themselves, on the
node that owns the queue's slot, and answer as before, on a standalone server and on every node of
a 3-node cluster: glide's by ``EVALSHA`` (the scripts), the bus's own by ``FCALL`` (its library)."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import attrs
import pytest
import trio

from echomq_trio import Bus, jobs
from echomq_trio._library import library
from echomq_trio.results import Admitted, Outcome
from echomq_trio.transport import Transport
from echomq_trio.wire import open_wire, script_source

pytestmark = pytest.mark.cluster

SCRIPTS = ("enqueue", "claim", "ack")  # the transitions this test runs after the flush


def _sha(name: str) -> str:
    return hashlib.sha1(script_source(name).encode()).hexdigest()


async def _held(node: Transport) -> tuple[list[int], bool]:
    """Which of ``SCRIPTS`` ``node`` holds (``SCRIPT EXISTS``), and whether it holds the bus's
    library."""
    scripts = await node.command("SCRIPT", "EXISTS", *(_sha(name) for name in SCRIPTS))
    return scripts, bool(await node.command("FUNCTION", "LIST", "LIBRARYNAME", library().name))


async def _flush(node: Transport) -> None:
    assert await node.command("SCRIPT", "FLUSH") == "OK"
    assert await node.command("FUNCTION", "FLUSH") == "OK"
    assert await _held(node) == ([0] * len(SCRIPTS), False)


@asynccontextmanager
async def _nodes(bus: Bus) -> AsyncIterator[list[Transport]]:
    """A plain connection to each server the bus was given (each node of a cluster)."""
    spec = bus.transport.spec
    async with AsyncExitStack() as stack:
        yield [
            await stack.enter_async_context(
                open_wire(attrs.evolve(spec, hosts=(host,), cluster=False))
            )
            for host in spec.hosts
        ]


async def _owner(nodes: list[Transport], key: str) -> Transport:
    """The node holding ``key``'s slot: the only one with keys in that slot."""
    if len(nodes) == 1:
        return nodes[0]
    slot = str(await nodes[0].command("CLUSTER", "KEYSLOT", key))
    (owner,) = [n for n in nodes if await n.command("CLUSTER", "COUNTKEYSINSLOT", slot)]
    return owner


async def test_scripts_flushed_from_every_node_are_loaded_again_and_answer_as_before(
    bus: Bus, queue: str
) -> None:
    first = await jobs.enqueue(bus, queue, b"one")
    assert first.outcome is Outcome.ENQUEUED
    async with _nodes(bus) as nodes:
        for node in nodes:
            await _flush(node)

        second = await jobs.enqueue(bus, queue, b"two")
        assert second.outcome is Outcome.ENQUEUED
        again = await jobs.enqueue(bus, queue, b"other", job_id=second.id)
        assert again == Admitted(second.id, Outcome.DUPLICATE)
        claimed = await jobs.claim(bus, queue, 5)
        assert [(j.id, j.payload, j.attempts) for j in claimed] == [
            (first.id, b"one", 1),
            (second.id, b"two", 1),
        ]
        assert [await jobs.ack(bus, queue, j.id, j.token) for j in claimed] == [Outcome.ACKED] * 2

        owner = await _owner(nodes, bus.keys(queue).pending)
        scripts, loaded = await _held(owner)
        assert scripts == [1] * len(SCRIPTS) or loaded, (scripts, loaded)


async def test_concurrent_enqueues_meeting_a_flushed_script_each_get_their_answer(
    bus: Bus, queue: str
) -> None:
    await jobs.enqueue(bus, queue, b"first")  # the script is loaded, then lost
    async with _nodes(bus) as nodes:
        for node in nodes:
            await _flush(node)
    answers: list[Admitted] = []

    async def one(i: int) -> None:
        answers.append(await jobs.enqueue(bus, queue, f"job {i}"))

    async with trio.open_nursery() as nursery:
        for i in range(32):
            nursery.start_soon(one, i)
    assert sorted(a.outcome.value for a in answers) == [Outcome.ENQUEUED.value] * 32
    assert len({a.id for a in answers}) == 32
    assert (await jobs.counts(bus, queue)).pending == 33
