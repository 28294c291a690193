"""What every claimer does with what it holds (``echomq_trio._leases``), on a real server."""

from collections.abc import Sequence

import trio

from echomq_trio import Bus, _leases, ids, jobs


async def test_claim_for_the_free_slots_and_give_back_what_was_not_claimed(
    bus: Bus, queue: str
) -> None:
    await jobs.enqueue_many(bus, queue, [(ids.generate("JOB"), f"j{n}") for n in range(3)])
    slots = trio.Semaphore(5)
    claimed, asked = await _leases.claim_for_slots(bus, queue, slots, 4, 10_000)
    assert (len(claimed), asked, slots.value) == (3, 4, 2)  # 3 held, 1 given back, 1 never taken
    held = {j.id: j for j in claimed}
    assert await _leases.release(bus, queue, held) == 3 and held == {}
    assert (await jobs.counts(bus, queue)).pending == 3
    assert await _leases.release(bus, queue, held) == 0  # nothing held: no round trip


async def test_renew_extends_every_held_lease_and_counts_the_lost(bus: Bus, queue: str) -> None:
    await jobs.enqueue(bus, queue, "x", job_id=ids.generate("JOB"))
    (job,) = await jobs.claim(bus, queue, 1, 300)
    lost: list[Sequence[str]] = []
    with trio.move_on_after(0.5):  # renewed every 100 ms past its first 300 ms lease
        await _leases.renew(bus, queue, {job.id: job}, 300, lost.append)
    assert lost == []  # nothing lost: not called
    assert (await jobs.reap(bus, queue)).reaped == 0  # still held
    # cancelled (its lease taken): the next renewal names it
    assert await jobs.cancel(bus, queue, job.id) is jobs.Cancelled.CANCELLED
    with trio.move_on_after(0.25):
        await _leases.renew(bus, queue, {job.id: job}, 300, lost.append)
    assert lost and all(list(ids_) == [job.id] for ids_ in lost)
