"""The calls of lanes (pure): pause, resume, configure, status."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from echomq_trio._checks import (
    check_group,
    check_int,
    check_lane_cursor,
    check_ms,
)
from echomq_trio._replies import as_text
from echomq_trio.keys import QueueKeys
from echomq_trio.protocol._base import (
    Call,
    _call,
    _named,
    _refuse_outdated,
)
from echomq_trio.results import (
    LanePage,
    LaneStatus,
)

# --- lanes ---------------------------------------------------------------------------------------


def lane_pause_call(k: QueueKeys, group: str) -> Call[int]:
    return _call(
        "lane_pause", k.ring, [k.prefix, check_group(group), "pause", ""], lane_pause_reply
    )


def lane_pause_until_call(k: QueueKeys, group: str, at_ms: int) -> Call[int]:
    at = str(check_ms("at_ms", at_ms, absolute=True))
    return _call(
        "lane_pause", k.ring, [k.prefix, check_group(group), "until", at], lane_pause_reply
    )


def lane_pause_reply(raw: Any) -> int:
    """The lane's wait end (server ms) for ``until``; 0 for ``pause``."""
    return int(raw)


def lane_resume_call(k: QueueKeys, group: str) -> Call[bool]:
    return _call("lane_resume", k.ring, [k.prefix, check_group(group)], lane_resume_reply)


def lane_resume_reply(raw: object) -> bool:
    """``'resumed'`` (it was held) or ``'not_held'``."""
    word = as_text(raw)
    if word not in ("resumed", "not_held"):
        raise ValueError(f"lane_resume answered {word!r}")
    return word == "resumed"


def lane_config_call(
    k: QueueKeys, group: str, *, limit: int | None = None, weight: int | None = None
) -> Call[tuple[int | None, int]]:
    lim = "" if limit is None else str(check_int("limit", limit, 0))
    wt = "" if weight is None else str(check_int("weight", weight, 1))
    return _call("lane_config", k.ring, [k.prefix, check_group(group), lim, wt], lane_config_reply)


def lane_config_reply(raw: Sequence[Any]) -> tuple[int | None, int]:
    r = _named("lane_config", raw)
    return (int(r["limit"]) or None, int(r["weight"]))


LANE_PAGE_MAX = 1000  # most lanes in one page of lane status


def lane_status_call(k: QueueKeys, groups: Sequence[str]) -> Call[LanePage]:
    """``lane_status`` of the lanes named."""
    named = [check_group(g) for g in groups]
    return _call("lane_status", k.lane_index, [k.prefix, "groups", *named], lane_status_reply)


def lane_status_page_call(k: QueueKeys, after: str = "", count: int = 100) -> Call[LanePage]:
    """``lane_status`` of at most ``count`` (1 to ``LANE_PAGE_MAX``) more lanes of the lane index
    from the cursor ``after`` (``''``: from the first; else a page's ``next``)."""
    cursor = check_lane_cursor(after)
    n = check_int("count", count, 1)
    if n > LANE_PAGE_MAX:
        raise ValueError(f"count must be <= {LANE_PAGE_MAX}, got {n}")
    return _call("lane_status", k.lane_index, [k.prefix, "page", cursor, str(n)], lane_status_reply)


def lane_status_reply(raw: Sequence[Any]) -> LanePage:
    """The next page's cursor (``''``: none) and per lane its row; ``Outdated`` for a queue
    of an earlier layout (before the lane index)."""
    _refuse_outdated("lane_status", raw)
    page = _named("lane_status", raw)
    nxt = as_text(page["next"])
    lanes = []
    for row in page["lanes"]:
        r = _named("lane_status/lane", row)
        lanes.append(
            LaneStatus(
                group=as_text(r["group"]),
                depth=int(r["depth"]),
                in_flight=int(r["in_flight"]),
                limit=int(r["limit"]) or None,
                weight=int(r["weight"]),
                paused=bool(r["paused"]),
                wait_until_ms=int(r["wait_until"]) or None,
                on_ring=bool(r["on_ring"]),
            )
        )
    return LanePage(lanes, nxt or None)
