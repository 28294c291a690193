"""The calls of flows (pure): ``flow_add`` (admit a tree of jobs at once) and ``flow`` (read a
job's parent and children). A job's reference in another job's row is its queue's prefix and
its id (``job_ref``; ``ref_parts`` reads one back)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from echomq_trio._checks import check_job_id
from echomq_trio._replies import as_bytes, as_text
from echomq_trio.keys import QueueKeys, queue_of_prefix
from echomq_trio.protocol._base import Arg, Call, _call, _items, _named, _outcomes
from echomq_trio.results import ChildEnd, FlowRow, Outcome

FLOW_MAX_JOBS = 10_000  # jobs in one flow: one script call, so one flow never holds the server long
_ID_LEN = 14  # a branded id's length: the tail of a reference


def job_ref(k: QueueKeys, job_id: str) -> str:
    """How a flow's row names job ``job_id`` of ``k``'s queue: its prefix and its id."""
    return k.prefix + check_job_id(job_id)


def ref_parts(ref: object) -> tuple[str, str]:
    """``(queue, id)`` of a reference ``job_ref`` made (``ValueError`` for anything else)."""
    text = as_text(ref)
    queue = queue_of_prefix(text[:-_ID_LEN])
    if queue is None:
        raise ValueError(f"{text!r} is not a job reference")
    return queue, check_job_id(text[-_ID_LEN:])


@attrs.frozen
class FlowJobArgs:
    """One job of a flow as ``flow_add`` takes it, checked: its queue's keys, id, payload, its
    parent's reference (``''`` for the root), its ``on_fail`` word (``''``: fail), its timeout
    (``''``: none) and its children's references."""

    keys: QueueKeys
    id: str
    payload: bytes
    parent: str
    on_fail: str
    timeout: str
    children: tuple[str, ...]


def flow_add_call(jobs: Sequence[FlowJobArgs]) -> Call[list[Outcome]]:
    """``flow_add``: the jobs of one flow, the root first; ``[ENQUEUED]`` per job, or
    ``[DUPLICATE]`` alone when the root exists already."""
    if not jobs:
        raise ValueError("a flow has at least one job")
    if len(jobs) > FLOW_MAX_JOBS:
        raise ValueError(f"a flow has at most {FLOW_MAX_JOBS} jobs, got {len(jobs)}")
    root = jobs[0].keys
    flat: list[Arg] = [root.prefix]
    for j in jobs:
        flat += [j.keys.prefix, j.id, j.payload, j.parent, j.on_fail, j.timeout,
                 " ".join(j.children)]  # fmt: skip
    return _call("flow_add", root.pending, flat, _outcomes)


def flow_call(k: QueueKeys, job_id: str) -> Call[FlowRow]:
    """``flow``: job ``job_id``'s parent and children, and each child's state and end."""
    return _call("flow", k.parents, [k.prefix, check_job_id(job_id)], flow_reply)


def flow_reply(raw: Sequence[Any]) -> FlowRow:
    r = _named("flow", raw)
    parent = as_text(r["parent"])
    unfinished = as_text(r["unfinished"])
    children = tuple(_child(c) for c in _items("flow/child", r["children"]))
    return FlowRow(as_text(r["state"]), ref_parts(parent) if parent else None,
                   as_text(r["on_fail"]) or "fail", int(unfinished) if unfinished else None,
                   children)  # fmt: skip


def _child(c: dict[str, Any]) -> ChildEnd:
    queue, job_id = ref_parts(c["ref"])
    state, end = as_text(c["state"]), as_bytes(c["end"])
    kind, value = end[:2], end[2:]
    if kind in (b"r:", b"n:"):
        return ChildEnd(queue, job_id, state or "completed", True,
                        value if kind == b"r:" else None)  # fmt: skip
    if kind in (b"d:", b"x:"):
        failed = "dead" if kind == b"d:" else "cancelled"
        return ChildEnd(queue, job_id, state or failed, True, None, value.decode())
    return ChildEnd(queue, job_id, state, False)
