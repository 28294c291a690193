"""Merging the pages of several streams into one, in time order (pure): how a partitioned
queue's events (one stream per partition) read as one queue's.

A stream id is ``<ms>-<seq>``: within one stream the ids only grow, and across streams the
``ms`` is each server's clock at the write, so ordering by ``(ms, seq)`` puts the entries of
``n`` streams in time order (ties between streams broken by the stream's index).

Paging: each stream is read after one shared cursor, at most ``count`` entries each. A stream
that filled its page may hold more entries past its last one, so a merged page only goes up to
the least of those last ids (``merge_page``): every entry at or below it, of every stream, has
been read, so the merged page holds every entry of the queue up to its own last id and the next
page can start after it. Entries of several streams with that same last id all go in the page
(a page may be up to ``n - 1`` entries longer than ``count``), so none is skipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

__all__ = ["id_key", "merge_page"]


class HasStreamId(Protocol):
    """Anything with a stream id (``events.Event``, ``AuditRecord``)."""

    @property
    def stream_id(self) -> str: ...


E = TypeVar("E", bound=HasStreamId)


def id_key(stream_id: str) -> tuple[int, int]:
    """``(ms, seq)`` of a stream id (``"<ms>"`` alone is ``seq`` 0), to order ids of any
    stream."""
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)


def merge_page(pages: Sequence[Sequence[E]], count: int) -> list[tuple[int, E]]:
    """One page of the streams whose pages (each read after the same cursor, at most ``count``
    entries each, in id order) are ``pages``: ``(index of the stream, entry)`` in time order,
    ``count`` of them (more only for entries that share the last one's id), never past an entry
    a full page may have left unread. Empty when every page is."""
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    full = [id_key(page[-1].stream_id) for page in pages if len(page) >= count]
    bound = min(full) if full else None
    merged = sorted(
        ((id_key(entry.stream_id), i, entry) for i, page in enumerate(pages) for entry in page),
        key=lambda t: (t[0], t[1]),
    )
    if bound is not None:
        merged = [t for t in merged if t[0] <= bound]
    out = merged[:count]
    if out:
        last = out[-1][0]
        out += [t for t in merged[count:] if t[0] == last]
    return [(i, entry) for _, i, entry in out]
