"""A short tour of the bus on an embedded server: ``python -m echomq_trio.demo``.

It enqueues a few jobs, schedules some for later, lets one fail and retry, then drains the
queue with a consumer and a metronome and prints what happens as it happens.
"""

from __future__ import annotations

import time

import trio

from echomq_trio import Consumer, Fixed, Job, Metronome, RetryIn, ids, jobs, open_bus

QUEUE = "demo"


def say(text: str) -> None:
    print(f"{time.strftime('%H:%M:%S')}  {text}", flush=True)


async def main() -> None:
    async with open_bus() as bus:
        assert bus.server is not None
        say(f"embedded server {bus.server.binary} on 127.0.0.1:{bus.server.port}")
        now = await bus.transport.server_time_ms()
        batch = [(ids.generate("JOB"), f"hello #{n}") for n in range(1, 4)]
        admitted = await jobs.enqueue_many(bus, QUEUE, batch)
        say(f"enqueue_many: {[a.outcome.value for a in admitted]}")
        again = await jobs.enqueue(bus, QUEUE, "x", job_id=batch[0][0])
        say(f"enqueue again: {again.outcome.value}")
        for secs in (1, 2):
            r = await jobs.enqueue_at(bus, QUEUE, f"due in {secs}s",
                                      now + secs * 1000)  # fmt: skip
            say(f"enqueue_at +{secs}s: {r.outcome.value}")
        await jobs.enqueue_in(bus, QUEUE, "flaky", 0)
        say(f"counts: {await jobs.counts(bus, QUEUE)}")

        async def handler(job: Job) -> RetryIn | None:
            if job.text == "flaky" and job.attempts == 1:
                say(f"handle {job.id} {job.text!r} attempt {job.attempts}: fails, retry in 500 ms")
                return RetryIn(500, "flaky the first time")
            say(f"handle {job.id} {job.text!r} attempt {job.attempts}: done")
            return None

        consumer = Consumer(bus, QUEUE, handler, concurrency=4, backoff=Fixed(500))
        async with trio.open_nursery() as nursery:
            await nursery.start(consumer.run)
            await nursery.start(Metronome(bus, QUEUE, beat_ms=250).run)
            while True:
                c = await jobs.counts(bus, QUEUE)
                if c.pending == c.scheduled == c.active == 0 and c.completed_total == 6:
                    break
                await trio.sleep(0.1)
            nursery.cancel_scope.cancel()
        say(f"drained: {await jobs.counts(bus, QUEUE)}")
        say(f"consumer: {consumer.statistics()}")


if __name__ == "__main__":
    trio.run(main)
