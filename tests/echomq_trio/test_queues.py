"""Listing a server's queues: every queue ever used, found by SCAN (on a cluster, on every
primary), and nothing that only looks like one."""

import pytest

from echomq_trio import Bus, ids, jobs, lanes, queues
from echomq_trio.keys import META_GLOB, queue_of_meta
from echomq_trio.testing import FaultyTransport

pytestmark = pytest.mark.cluster


async def test_queue_names_lists_every_used_queue_and_nothing_else(bus: Bus, queue: str) -> None:
    names = [f"{queue}-{i}" for i in range(25)]  # spread over the cluster's slots
    for name in names:
        await jobs.enqueue(bus, name, "x", job_id=ids.generate("JOB"))
    await lanes.enqueue(bus, f"{queue}-lane", "g1", "y", job_id=ids.generate("JOB"))
    await bus.transport.command("SET", bus.keys(f"{queue}-fake").meta + "X", "1")  # not a meta key
    found = [n for n in await queues.queue_names(bus, count=10) if n.startswith(queue)]
    assert found == sorted([*names, f"{queue}-lane"])


def test_queue_name_reads_only_meta_keys() -> None:
    assert queue_of_meta("emq:{mail}:meta") == "mail"
    for key in ("emq:{mail}:pending", "emq:{}:meta", "emq:{a b}:meta", "x:{mail}:meta",
                "emq:{mail}:app:meta", "emq:{a}b}:meta"):  # fmt: skip
        assert queue_of_meta(key) is None, key


async def test_scan_is_one_transport_call_the_fault_wrapper_sees(bus: Bus, queue: str) -> None:
    await jobs.enqueue(bus, queue, "x", job_id=ids.generate("JOB"))
    faulty = FaultyTransport(bus.transport)
    assert bus.keys(queue).meta in await faulty.scan(META_GLOB, count=50)
    assert [(c.op, c.name) for c in faulty.calls] == [("scan", "SCAN")]
