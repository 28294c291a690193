"""What a replica holds, read from it (blocking; callers in trio use ``trio.to_thread``):
``read_contents`` lists it and reads its newest manifest; ``build_compaction`` reads what the
next compaction merges and builds the compacted object and the manifest that names it (the
rules are ``compaction``'s, the formats ``segments``').

``NoSuchName`` from ``read_contents`` or ``read_all`` means an object listed a moment ago was
deleted since (a compaction's clean-up): read the contents again.
"""

from __future__ import annotations

import attrs

from codemojex.audit import compaction, segments
from codemojex.audit.compaction import Contents
from codemojex.audit.replica import Replica

__all__ = ["Compaction", "build_compaction", "read_contents"]


@attrs.frozen
class Compaction:
    """A compacted object to create (``piece`` names it), then the manifest that names it."""

    data: bytes
    piece: segments.Piece
    manifest: segments.Manifest
    merged: int  # the manifest's last objects it took in


def read_contents(replica: Replica, *, previous: bool = False) -> Contents:
    """The replica's names by folder and its newest manifest (``previous``: and the one before
    it). The segments are listed first, then the manifests (see ``compaction``)."""
    segment_names = tuple(sorted(replica.names(segments.SEGMENTS), key=segments.number))
    compacted = tuple(sorted(replica.names(segments.COMPACTED), key=segments.span))
    manifests = tuple(sorted(replica.names(segments.MANIFESTS), key=segments.number))
    epochs = tuple(sorted(replica.names(segments.EPOCHS), key=segments.number))

    def manifest(name: str) -> segments.Manifest:
        return segments.decode_manifest(replica.get(name))

    return Contents(
        segments=segment_names,
        compacted=compacted,
        manifests=manifests,
        epochs=epochs,
        manifest=manifest(manifests[-1]) if manifests else None,
        previous=manifest(manifests[-2]) if previous and len(manifests) > 1 else None,
    )


def build_compaction(
    replica: Replica,
    contents: Contents,
    epoch: int,
    compact_rows: int,
    max_segments: int | None = None,
) -> Compaction | None:
    """The next compaction of the replica whose ``contents`` were just read, by a writer of
    ``epoch``: the segments after the newest manifest, in order, until they hold
    ``compact_rows`` rows or are ``max_segments`` (at least one segment), with the manifest's
    last objects they take in (``compaction.tail_to_merge``). ``None`` when no segment follows
    the manifest. A longer backlog (a replica that was never compacted) takes several rounds."""
    batch: list[bytes] = []
    rows = 0
    for name in contents.after[:max_segments]:
        batch.append(replica.get(name))
        rows += segments.header_of(batch[-1]).rows
        if rows >= compact_rows:
            break
    if not batch:
        return None
    objects = () if contents.manifest is None else contents.manifest.objects
    merged = compaction.tail_to_merge(objects, rows, compact_rows)
    tail = objects[len(objects) - merged :]
    first = tail[0].first_segment if tail else segments.span(contents.after[0])[0]
    last = segments.span(contents.after[len(batch) - 1])[1]
    pieces = [replica.get(piece.name) for piece in tail] + batch
    data, header = segments.merge(first, last, epoch, pieces)
    piece = segments.Piece.of(header)
    manifest = compaction.next_manifest(contents.manifest, epoch, merged, piece, header.last_seq)
    return Compaction(data, piece, manifest, merged)
