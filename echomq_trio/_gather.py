"""Coalesced enqueues: single ``jobs.enqueue`` calls made by many tasks at once go to the server
as one ``enqueue`` script call per scheduler tick.

Theory of operation:

* Each caller checks its own job (id, payload) before anything else, in its own task: a bad
  payload raises in that caller only and never joins a batch.
* With no enqueue of the queue in flight, a caller sends its job alone at once (``send_one``,
  the one-job call, when given): a sequential caller pays nothing for coalescing. While one
  is in flight, callers gather: the first becomes the batch's leader, yields twice to the
  scheduler (``cancel_shielded_checkpoint``: every task already runnable gets to join, and one
  that joined and was cancelled at once can leave), takes the batch and sends it as one script
  call (one per ``ENQUEUE_CHUNK`` jobs), then hands each caller its own answer, or its own
  copy of the error.
  Jobs of one batch are admitted in arrival order, and a caller waits for its answer before it
  can enqueue again, so each caller's enqueues keep their order.
* A batch holds at most half the callers in flight (and at least ``BATCH_MIN``); the next
  caller leads a new batch, which leaves as soon as it has gathered, whether or not the one
  before has its answer. So about two batches are out at once: while the server runs one, the
  callers of the other take their answers and gather their next jobs (one batch of all the
  callers at a time is markedly slower: the docs' benchmarks, ``docs/benchmarks/``,
  "Measurements behind the design").
* A caller counts as in flight from its arrival until it has its answer in hand (``in_flight``),
  not only while its call is on the wire. The callers of a batch all wake when its answer
  comes (they share one event); the first of them to enqueue again finds the others still in
  flight and gathers their next jobs, rather than going alone ahead of them.
* Cancellation. A caller cancelled before its batch is taken leaves the batch: nothing is sent
  for it, and it raises ``Cancelled``. Once its batch has been taken, its job goes to the server
  with the others: the caller then waits for the answer (shielded, for at most the request
  timeout plus a second) and returns it (the cancellation is delivered at its next checkpoint).
  A job sent alone is an ordinary call, cancelled like any other: it may or may not have been
  admitted.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable, Sequence

import attrs
import trio

from echomq_trio.errors import RequestTimedOut
from echomq_trio.results import Admitted

__all__ = ["Gatherer"]

GATHER_TICKS = 2  # scheduler ticks a leader waits for others to join its batch
BATCH_MIN = 8  # a batch may always hold this many callers, however few are in flight
Send = Callable[[Sequence[tuple[str, bytes]]], Awaitable[list[Admitted]]]
SendOne = Callable[[tuple[str, bytes]], Awaitable[Admitted]]


@attrs.define(eq=False)
class _Waiter:
    item: tuple[str, bytes]
    answer: Admitted | None = None
    error: BaseException | None = None


@attrs.define(eq=False)
class _Batch:
    waiters: list[_Waiter]
    done: trio.Event = attrs.Factory(trio.Event)  # set once every waiter has its answer or error
    taken: bool = False  # sent (or being sent): a waiter can no longer leave


@attrs.define(eq=False)
class Gatherer:
    """Gathers the single enqueues of one queue of one bus. ``timeout_s`` bounds a shielded wait
    for a batch already sent."""

    timeout_s: float
    in_flight: int = 0  # callers that do not have their answer yet
    _batch: _Batch | None = None  # the batch being gathered (its leader is waiting)

    @property
    def idle(self) -> bool:
        return self.in_flight == 0 and self._batch is None

    async def enqueue(
        self, item: tuple[str, bytes], send: Send, send_one: SendOne | None = None
    ) -> Admitted:
        """Admit ``item`` (a checked ``(job id, payload)``) through ``send``, alone or with the
        items of other callers; alone through ``send_one`` when it is given (the same call for
        one job, built without the lists a batch needs)."""
        alone = self.idle  # alone: an ordinary call, cancellable like every other call of the bus
        self.in_flight += 1
        try:
            if alone:
                if send_one is not None:
                    return await send_one(item)
                (answer,) = await send([item])
                return answer
            me = _Waiter(item)
            batch = self._batch
            if batch is not None and len(batch.waiters) < max(BATCH_MIN, self.in_flight // 2):
                batch.waiters.append(me)
                return await self._follow(batch, me)
            return await self._lead(me, send)
        finally:
            self.in_flight -= 1

    async def _lead(self, me: _Waiter, send: Send) -> Admitted:
        self._batch = batch = _Batch([me])
        # Let the runnable tasks join; the second tick lets a caller that joined with the
        # leader and is cancelled at once leave before the batch is taken.
        try:
            for _ in range(GATHER_TICKS):
                await trio.lowlevel.cancel_shielded_checkpoint()
        finally:
            if self._batch is batch:
                self._batch = None
        batch.taken = True
        await self._send(batch, send)
        return self._result(me)

    async def _send(self, batch: _Batch, send: Send) -> None:
        waiters = batch.waiters
        try:
            with trio.CancelScope(shield=True, deadline=trio.current_time() + self.timeout_s):
                answers = await send([w.item for w in waiters])
                for w, a in zip(waiters, answers, strict=True):
                    w.answer = a
            if any(w.answer is None for w in waiters):
                raise RequestTimedOut("an enqueue batch passed its deadline")
        except BaseException as exc:
            for w in waiters:
                w.error = exc
            raise
        finally:
            batch.done.set()

    async def _follow(self, batch: _Batch, me: _Waiter) -> Admitted:
        try:
            await batch.done.wait()
        except trio.Cancelled:
            if not batch.taken:
                batch.waiters.remove(me)
                raise
            with trio.CancelScope(shield=True, deadline=trio.current_time() + self.timeout_s):
                await batch.done.wait()
        return self._result(me)

    @staticmethod
    def _result(me: _Waiter) -> Admitted:
        if me.answer is not None:
            return me.answer
        if me.error is None:
            raise RequestTimedOut("the answer of an enqueue batch never came")
        error = copy.copy(me.error)  # each caller raises its own exception object
        raise error from me.error
