"""Flows: jobs that wait for other jobs. A parent runs only after all its children have ended,
and its handler reads their results (BullMQ's flows, Celery's chords).

Theory of operation. ``add`` admits a whole tree in one script (``flow_add``): every job without
children goes to its queue's pending set at once; every parent waits, stored as
``waiting_children`` in its queue's ``parents`` set, with the count of its children not yet
ended. Each child's row names its parent; each parent's row names its children. The scripts
that end a job (``ack``, ``retry`` when it dies, ``cancel``, ``delete``) read the row's
``parent`` field in the read they make anyway, so a job outside a flow costs nothing more:

* a child that completes stores its result with its parent (``children_results``) and counts
  down; the last moves the parent to pending, where any consumer claims it as any job;
* a child that dies or is cancelled (or deleted) fails its parent by default: the parent goes to
  the dead set with a reason naming the child, and a failed parent fails its own parent in the
  same step. A child added with ``on_failure=OnFailure.IGNORE`` counts as ended instead (its
  error is kept with its parent, ``children``), and the parent goes on;
* cancelling a parent (``jobs.cancel``) cancels its waiting children (pending, or scheduled for
  a retry, or themselves waiting for theirs) in the same step; a running child runs on, and its
  end then moves nothing.

Every move is one script, so a ``kill -9`` anywhere leaves the flow whole: a child's ack and
its parent's count are one step, and a child killed mid-run comes back through its lease and the
reaper like any job. Adding the same flow again (the same root id) changes nothing and answers
``DUPLICATE``.

Queues: each job names its queue (``Flow.queue``; ``None``: its parent's). On a standalone
server a flow may span queues. On a cluster every key of queue ``q`` carries the hash tag
``{q}`` so one script reaches only one slot: a flow's queues must share the root queue's slot
(two queue names share one only by chance, or by a tag of their own), and ``add`` refuses
another with a one-line ``ValueError`` before any I/O.

Flows admit flat jobs (no lanes); a parent's own run, retries and timeout are a job's.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence

import attrs

from echomq_trio import protocol
from echomq_trio._checks import check_job_id, check_payload
from echomq_trio.bus import Bus
from echomq_trio.ids import generate
from echomq_trio.keys import queue_keys
from echomq_trio.protocol import FLOW_MAX_JOBS, FlowJobArgs
from echomq_trio.resp._cluster import key_slot
from echomq_trio.results import ChildEnd, FlowRow, Outcome

__all__ = [
    "FLOW_MAX_JOBS",
    "ChildEnd",
    "Flow",
    "FlowAdded",
    "FlowJob",
    "FlowTree",
    "OnFailure",
    "add",
    "children",
    "children_results",
    "outline",
    "plan",
    "tree",
]


class OnFailure(enum.StrEnum):
    """What a child's failure (dead, cancelled or deleted) does to its parent: ``FAIL`` (the
    default) kills the parent, with a reason naming the child; ``IGNORE`` counts the child as
    ended, keeps its error with the parent (``children``) and lets the parent go on."""

    FAIL = "fail"
    IGNORE = "ignore"


def _children(value: Iterable[Flow]) -> tuple[Flow, ...]:
    return tuple(value)


@attrs.frozen
class Flow:
    """A job and the jobs it waits for: ``payload``, its ``children`` (each a ``Flow``: nested
    flows are trees), its ``queue`` (``None``: its parent's, or for the root ``add``'s), its
    ``job_id`` (a branded ``JOB`` id; ``None``: minted; give ids to make a retried ``add``
    idempotent), ``on_failure`` (what its own failure does to its parent) and ``timeout_ms``
    (its handler's deadline per attempt, as at ``jobs.enqueue``)."""

    payload: str | bytes
    children: tuple[Flow, ...] = attrs.field(default=(), converter=_children)
    queue: str | None = None
    job_id: str | None = None
    on_failure: OnFailure = OnFailure.FAIL
    timeout_ms: int | None = None


@attrs.frozen
class FlowJob:
    """An admitted job of a flow: its ``queue``, its ``id`` and its ``children``."""

    queue: str
    id: str
    children: tuple[FlowJob, ...] = ()

    def walk(self) -> list[FlowJob]:
        """This job and all below it, each parent before its children."""
        out, todo = [], [self]
        while todo:
            job = todo.pop()
            out.append(job)
            todo.extend(reversed(job.children))
        return out


@attrs.frozen
class FlowAdded:
    """What ``add`` did: the flow's jobs as a tree (``root``) and the ``outcome``: ``ENQUEUED``
    (every job admitted), or ``DUPLICATE`` (the root's id is a live job's: nothing changed)."""

    root: FlowJob
    outcome: Outcome

    @property
    def ok(self) -> bool:
        """The flow was admitted by this call (not a duplicate)."""
        return self.outcome is Outcome.ENQUEUED


@attrs.frozen
class FlowTree:
    """A job's flow as ``tree`` reads it, for the CLI and the dashboard: the job's ``queue``,
    ``id`` and ``state`` (its stored word; a child whose row is gone reads as its end, ``''``
    when unknown), its ``parent`` (``(queue, id)``, ``None`` for a root) and that one's
    ``parent_state`` (the top job's only), its ``on_failure`` word, ``unfinished`` children
    (``None`` without children), its ``result`` and ``error`` as its parent keeps them, and its
    ``children``; ``more`` counts the jobs below not read (past ``max_jobs``)."""

    queue: str
    id: str
    state: str
    parent: tuple[str, str] | None = None
    parent_state: str = ""
    on_failure: str = "fail"
    unfinished: int | None = None
    result: bytes | None = None
    error: str | None = None
    children: tuple[FlowTree, ...] = ()
    more: int = 0


# --- the plan (pure) -----------------------------------------------------------------------------


def plan(
    queue: str, flow: Flow, max_bytes: int, *, cluster: bool = False
) -> tuple[FlowJob, list[FlowJobArgs]]:
    """The admitted tree and ``flow_add``'s arguments for ``flow`` rooted in ``queue`` (the root
    first), every input checked: ``ValueError``/``TypeError`` for a bad payload, id, queue or
    timeout, a job twice in the flow, more than ``FLOW_MAX_JOBS`` jobs, or (``cluster``) a
    queue outside the root queue's slot."""
    if not isinstance(flow, Flow):
        raise TypeError(f"a flow must be a Flow, got {type(flow).__name__}")
    root_keys = queue_keys(flow.queue or queue)
    slot = key_slot(root_keys.pending)
    args: list[FlowJobArgs] = []
    seen: set[tuple[str, str]] = set()

    def visit(node: Flow, inherited: str, parent_ref: str) -> FlowJob:
        if not isinstance(node, Flow):
            raise TypeError(f"a flow's children must be Flows, got {type(node).__name__}")
        node_queue = node.queue or inherited
        if len(args) >= FLOW_MAX_JOBS:
            raise ValueError(f"a flow has at most {FLOW_MAX_JOBS} jobs")
        k = queue_keys(node_queue)
        if cluster and key_slot(k.pending) != slot:
            raise ValueError(
                f"flow: queue {node_queue!r} is not in the slot of queue {root_keys.name!r} "
                f"({key_slot(k.pending)}, not {slot}): on a cluster a flow's queues share one slot"
            )
        job_id = check_job_id(node.job_id) if node.job_id else generate("JOB")
        if (node_queue, job_id) in seen:
            raise ValueError(f"flow: job {job_id} of queue {node_queue!r} is in the flow twice")
        seen.add((node_queue, job_id))
        on_fail = OnFailure(node.on_failure)
        here = len(args)
        ref = protocol.job_ref(k, job_id)
        args.append(
            FlowJobArgs(k, job_id, check_payload(node.payload, max_bytes), parent_ref,
                        "" if on_fail is OnFailure.FAIL else on_fail.value,
                        protocol.timeout_arg(node.timeout_ms), ())
        )  # fmt: skip
        kids = tuple(visit(c, node_queue, ref) for c in node.children)
        refs = tuple(protocol.job_ref(queue_keys(c.queue), c.id) for c in kids)
        args[here] = attrs.evolve(args[here], children=refs)
        return FlowJob(node_queue, job_id, kids)

    root = visit(flow, root_keys.name, "")
    return root, args


def outline(tree: FlowTree) -> list[tuple[int, FlowTree]]:
    """``tree``'s jobs as lines of a tree view (the CLI's ``echomq flow``, the dashboard): each
    job with its depth below the top, each parent before its children (pure)."""
    out: list[tuple[int, FlowTree]] = []
    todo = [(0, tree)]
    while todo:
        depth, node = todo.pop()
        out.append((depth, node))
        todo.extend((depth + 1, c) for c in reversed(node.children))
    return out


# --- on the server --------------------------------------------------------------------------------


async def add(bus: Bus, queue: str, flow: Flow) -> FlowAdded:
    """Admit ``flow`` (its root in ``queue`` unless ``flow.queue`` says otherwise), all of it in
    one step: its jobs without children are ready at once, each parent waits until all its
    children have ended (``FlowAdded``). ``DUPLICATE`` when the root's id is a live job's
    (nothing changes); a ``BusError`` naming the job when another of its ids is. Bad input is a
    ``ValueError``/``TypeError`` before any I/O (see ``plan``), as is a flow on a cluster whose
    queues do not share the root queue's slot.

    A cancelled call admitted all of the flow or none of it; call again with the same ids:
    ``DUPLICATE`` then means the first call went through."""
    root, args = plan(queue, flow, bus.max_payload_bytes, cluster=bus.transport.spec.cluster)
    outcomes = await bus.run(protocol.flow_add_call(args))
    return FlowAdded(root, outcomes[0])


async def _row(bus: Bus, queue: str, job_id: str) -> FlowRow:
    return await bus.run(protocol.flow_call(queue_keys(queue), job_id))


async def children(bus: Bus, queue: str, job_id: str) -> list[ChildEnd]:
    """Job ``job_id``'s children, in the order they were added, each with its state, whether
    it has ended for its parent, and its result or (a failure the parent ignored) its error;
    ``[]`` for a job without children, or no job. Read only: a cancelled call changed
    nothing."""
    return list((await _row(bus, queue, job_id)).children)


async def children_results(bus: Bus, queue: str, job_id: str) -> dict[str, bytes | None]:
    """The results of job ``job_id``'s completed children by child id (``None``: a child that
    returned none), for its handler: when a parent runs, every child has ended, so this holds
    every child but those whose failure it ignores (``children`` has their errors). Kept with
    the parent until it finishes (then deleted, or kept as long as its row where its queue keeps
    results). Read only."""
    return {c.id: c.result for c in await children(bus, queue, job_id) if c.state == "completed"}


async def tree(bus: Bus, queue: str, job_id: str, *, max_jobs: int = 200) -> FlowTree | None:
    """Job ``job_id``'s flow from it down (its parent named, with that one's state), at most
    ``max_jobs`` jobs read (one round trip each); ``None`` when the job has no row. Read only."""
    row = await _row(bus, queue, job_id)
    if not row.state:
        return None
    parent_state = ""
    if row.parent is not None:
        parent_state = (await _row(bus, *row.parent)).state
    budget = [max(1, max_jobs) - 1]

    async def below(
        parent: tuple[str, str], children: Sequence[ChildEnd]
    ) -> tuple[tuple[FlowTree, ...], int]:
        out, more = [], 0
        for c in children:
            if budget[0] <= 0:
                more += 1
                continue
            budget[0] -= 1
            r = await _row(bus, c.queue, c.id)
            kids, deeper = await below((c.queue, c.id), r.children)
            out.append(
                FlowTree(c.queue, c.id, c.state, parent,
                         on_failure=r.on_failure, unfinished=r.unfinished, result=c.result,
                         error=c.error, children=kids, more=deeper)
            )  # fmt: skip
        return tuple(out), more

    kids, more = await below((queue, job_id), row.children)
    return FlowTree(queue, job_id, row.state, row.parent, parent_state, row.on_failure,
                    row.unfinished, children=kids, more=more)  # fmt: skip
