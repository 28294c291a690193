"""Compaction of a replica (pure): which objects make up the archive, when segments are
compacted, which objects merge, the next manifest, and which superseded objects may go.

Theory of operation:

* The archive in a replica is the newest manifest's objects, then every segment after the
  segment it ends at (``Contents.live``). A reader lists the segments *before* the manifests:
  a segment is deleted only once a manifest covers it, and that manifest is then listed too.
* Compaction starts once ``compact_segments`` segments follow the newest manifest. It merges
  them, in order (up to about ``compact_rows`` rows, or a few times ``compact_segments``
  segments, a round; a longer backlog takes more rounds), into one compacted object, and
  writes manifest n+1: the objects of manifest n with the new one in place of those it took
  in. Both are created, never overwritten; the manifest is numbered, so of two writers of
  manifest n+1 one wins and the other loses cleanly.
* Compacted objects grow by tiers (``tail_to_merge``), like a binary counter: a new object takes
  in the manifest's last objects while each is less than twice what it holds so far and the
  sum stays within ``compact_rows``. So of two neighbours in a manifest the first holds at least
  twice the rows of the second, or both together more than ``compact_rows``: a manifest names
  about 2 x rows / ``compact_rows`` objects and a run of halving ones at the end (a run can be
  left behind only by a batch of more than ``compact_rows / 2`` rows, so never more than a
  small multiple of that), and a row is written again only a few times (each time into an
  object at least 1.5 times as big).
* Clean-up (``garbage``) lags one manifest: what the newest *and* the one before it need is
  kept (their objects, and every segment after the one before's end); only what manifest n-1
  had already superseded goes once manifest n is written. A restore that read manifest n-1 or
  n finds every object it needs; one that read an older manifest meets a missing object and
  starts again from the newest (``replicator.restore``). Nothing is deleted that a manifest
  could still come to name: a writer of manifest n+1 starts from manifest n, whose objects are
  kept, and writes objects past its end.
* So a replica holds: about 2 x ``compact_segments`` segments at most (those the newest manifest
  covers, and those after it), the compacted objects of two manifests (growing with the rows,
  by about one per ``compact_rows / 2``), two manifests (older ones linger only if a stale
  writer adds one), and one epoch per archiver start.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

from codemojex.audit import segments
from codemojex.audit.segments import Manifest, Piece

__all__ = [
    "DEFAULT_COMPACT_ROWS",
    "DEFAULT_COMPACT_SEGMENTS",
    "Contents",
    "garbage",
    "next_manifest",
    "tail_to_merge",
]

DEFAULT_COMPACT_SEGMENTS = 200  # segments after the newest manifest that start a compaction
DEFAULT_COMPACT_ROWS = 50_000  # compacted objects merge while they stay within this many rows


@attrs.frozen
class Contents:
    """What a replica holds: its names by folder (each in number order) and its newest manifest
    (and, when read, the one before it)."""

    segments: tuple[str, ...] = ()
    compacted: tuple[str, ...] = ()
    manifests: tuple[str, ...] = ()
    epochs: tuple[str, ...] = ()
    manifest: Manifest | None = None  # the newest
    previous: Manifest | None = None  # the one before the newest

    @property
    def covered(self) -> int:
        """The last segment the newest manifest covers (0: none)."""
        return 0 if self.manifest is None else self.manifest.last_segment

    @property
    def after(self) -> tuple[str, ...]:
        """The segments after the newest manifest, in order."""
        return tuple(n for n in self.segments if segments.number(n) > self.covered)

    @property
    def live(self) -> tuple[str, ...]:
        """The objects that make up the archive, in order."""
        kept = () if self.manifest is None else tuple(p.name for p in self.manifest.objects)
        return kept + self.after

    @property
    def last_segment(self) -> int:
        """The newest segment the replica holds, as a segment or in the newest manifest."""
        return max([self.covered, *(segments.number(n) for n in self.segments)])

    @property
    def objects(self) -> int:
        return len(self.segments) + len(self.compacted) + len(self.manifests) + len(self.epochs)

    def garbage(self) -> list[str]:
        """What may be deleted now (see ``garbage``)."""
        names = (*self.segments, *self.compacted, *self.manifests)
        return garbage(names, self.manifest, self.previous)


def tail_to_merge(objects: Sequence[Piece], batch_rows: int, compact_rows: int) -> int:
    """How many of a manifest's last ``objects`` a new batch of ``batch_rows`` rows takes in:
    each holding less than twice the rows taken so far, while the sum stays within
    ``compact_rows``."""
    taken, rows = 0, batch_rows
    for piece in reversed(objects):
        if piece.rows >= 2 * rows or rows + piece.rows > compact_rows:
            break
        taken, rows = taken + 1, rows + piece.rows
    return taken


def next_manifest(
    newest: Manifest | None, epoch: int, merged: int, new: Piece, last_seq: int
) -> Manifest:
    """The manifest after ``newest``: its objects but the last ``merged``, then ``new``."""
    kept = () if newest is None else newest.objects[: len(newest.objects) - merged]
    number = 1 if newest is None else newest.manifest + 1
    return Manifest(number, epoch, new.last_segment, last_seq, (*kept, new))


def garbage(names: Iterable[str], newest: Manifest | None, previous: Manifest | None) -> list[str]:
    """Of ``names`` (segments, compacted objects, manifests), those the manifest before the newest
    (``previous``) has superseded and neither it nor the newest names: segments it covers,
    compacted objects that end within it, manifests older than it. Nothing before there are two
    manifests; epochs never."""
    if newest is None or previous is None:
        return []
    named = {p.name for p in (*previous.objects, *newest.objects)}
    out = []
    for name in names:
        if name.startswith(segments.MANIFESTS):
            gone = segments.number(name) < previous.manifest
        elif name.startswith((segments.SEGMENTS, segments.COMPACTED)):
            gone = name not in named and segments.span(name)[1] <= previous.last_segment
        else:
            gone = False
        if gone:
            out.append(name)
    return out
