"""The calls of a queue's own controls (pure): pause, resume, the cap on jobs in flight, and the
deletion of waiting jobs, one or a page at a time."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from echomq_trio._checks import check_group, check_int, check_job_id, check_ms
from echomq_trio._replies import as_text
from echomq_trio.keys import QueueKeys
from echomq_trio.protocol._base import Call, _call, _named, outcome_reply
from echomq_trio.results import CapShare, DeletedPage, Outcome

DELETE_PAGE_MAX = 1000  # most jobs one page of delete looks at
DELETE_STATES = ("pending", "scheduled")  # the states delete_page takes jobs from
# a score (exclusive with '(': past a priority's jobs) and how many at it were kept
_CURSOR = re.compile(r"(-inf|\(?-?[0-9]+(\.[0-9]+)?(e[+-]?[0-9]+)?):[0-9]{1,9}")


def queue_pause_call(k: QueueKeys) -> Call[bool]:
    return _call("queue_pause", k.meta, [k.prefix], queue_pause_reply)


def queue_pause_reply(raw: object) -> bool:
    """``'paused'`` (by this call: ``True``) or ``'already'``."""
    word = as_text(raw)
    if word not in ("paused", "already"):
        raise ValueError(f"queue_pause answered {word!r}")
    return word == "paused"


def queue_resume_call(k: QueueKeys) -> Call[bool]:
    return _call("queue_resume", k.meta, [k.prefix], queue_resume_reply)


def queue_resume_reply(raw: object) -> bool:
    """``'resumed'`` (it was paused: ``True``) or ``'not_paused'``."""
    word = as_text(raw)
    if word not in ("resumed", "not_paused"):
        raise ValueError(f"queue_resume answered {word!r}")
    return word == "resumed"


def queue_limit_call(k: QueueKeys, max_active: int | None) -> Call[tuple[int | None, int]]:
    """Set the queue's cap on jobs in flight (>= 1), or clear it (``None``)."""
    cap = "" if max_active is None else str(check_int("max_active", max_active, 1))
    return _call("queue_limit", k.meta, [k.prefix, cap], queue_limit_reply)


def queue_limit_reply(raw: Sequence[Any]) -> tuple[int | None, int]:
    """``(the cap in effect or None, jobs in active)``."""
    r = _named("queue_limit", raw)
    return int(r["max_active"]) or None, int(r["active"])


CAP_SHARE_MODES = ("stamp", "lower", "raise", "clear")


def cap_total_call(
    k: QueueKeys, mode: str, arg: int | str = "", lease_ms: int = 0
) -> Call[tuple[int | None, int]]:
    """A partitioned queue's total cap on jobs in flight, on partition 0 (``k``): ``"set"`` it
    to ``arg`` (>= 1), ``"clear"`` it, or ``"begin"`` a round (``arg``: the holder of a lease
    of ``lease_ms`` on the rounds, or ``""`` for none). Answers ``(the total or None, the
    epoch)`` (epoch 0: no round begun)."""
    if mode == "set":
        args = [k.prefix, mode, str(check_int("total", arg, 1))]
    elif mode == "clear":
        args = [k.prefix, mode]
    elif mode == "begin":
        args = [k.prefix, mode, str(arg), str(check_int("lease_ms", lease_ms, 0))]
    else:
        raise ValueError(f"cap_total's mode is set, clear or begin, not {mode!r}")
    return _call("cap_total", k.meta, args, cap_total_reply)


def cap_total_reply(raw: Sequence[Any]) -> tuple[int | None, int]:
    """``(the total in effect or None, the epoch: 0 for no round begun)``."""
    r = _named("cap_total", raw)
    return int(r["total"]) or None, int(r["epoch"])


def cap_share_call(k: QueueKeys, mode: str, epoch: int, cap: int = 0) -> Call[CapShare]:
    """One partition's share of its queue's cap, fenced by the round's ``epoch``: ``"stamp"``
    it, ``"lower"`` or ``"raise"`` its cap to ``cap`` (>= 0), or ``"clear"`` it."""
    if mode not in CAP_SHARE_MODES:
        raise ValueError(f"cap_share's mode is one of {', '.join(CAP_SHARE_MODES)}, not {mode!r}")
    args = [k.prefix, mode, str(check_int("epoch", epoch, 1)), str(check_int("cap", cap, 0))]
    return _call("cap_share", k.meta, args, cap_share_reply)


def cap_share_reply(raw: Sequence[Any]) -> CapShare:
    """A partition's reading (``CapShare``) after a ``cap_share`` call."""
    r = _named("cap_share", raw)
    cap = int(r["max_active"])
    return CapShare(bool(int(r["fenced"])), None if cap < 0 else cap, int(r["active"]),
                    int(r["waiting"]))  # fmt: skip


def delete_call(k: QueueKeys, job_id: str) -> Call[Outcome]:
    return _call("delete", k.pending, [k.prefix, "one", check_job_id(job_id)], outcome_reply)


def delete_page_call(
    k: QueueKeys,
    state: str = "pending",
    *,
    group: str | None = None,
    older_than_ms: int | None = None,
    limit: int = 100,
    cursor: str | None = None,
) -> Call[DeletedPage]:
    """``delete`` of a page: at most ``limit`` (1 to ``DELETE_PAGE_MAX``) jobs of ``state``
    looked at from ``cursor`` (``None``: the start; else a page's ``next``), those that match
    deleted. ``pending`` with a ``group`` is that lane; without, the flat set; ``scheduled``
    with a ``group``, only that lane's scheduled jobs. ``older_than_ms``: only jobs minted at
    least that long ago (server clock; the time in the id)."""
    if state not in DELETE_STATES:
        raise ValueError(f"state must be one of {list(DELETE_STATES)}, got {state!r}")
    g = "" if group is None else check_group(group)
    older = "" if older_than_ms is None else str(check_ms("older_than_ms", older_than_ms))
    n = check_int("limit", limit, 1)
    if n > DELETE_PAGE_MAX:
        raise ValueError(f"limit must be <= {DELETE_PAGE_MAX}, got {n}")
    after = _check_cursor(cursor)
    which = "lane" if state == "pending" and g else state
    args = [k.prefix, "page", which, g, older, str(n), after]
    return _call("delete", k.pending, args, delete_page_reply)


def _check_cursor(cursor: object) -> str:
    if cursor is None or cursor == "":
        return ""
    if not isinstance(cursor, str) or not _CURSOR.fullmatch(cursor):
        raise ValueError(f"cursor must be None or a page's next cursor, got {cursor!r}")
    return cursor


def delete_page_reply(raw: Sequence[Any]) -> DeletedPage:
    r = _named("delete", raw)
    return DeletedPage(int(r["deleted"]), as_text(r["next"]) or None)
