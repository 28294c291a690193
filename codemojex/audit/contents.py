"""What a replica holds, read from it (blocking; callers in trio use ``trio.to_thread``):
``read_contents`` lists it and reads its newest manifest; ``build_compaction`` reads what the
next compaction merges and builds the compacted object and the manifest that names it (the
rules are ``compaction``'s, the formats ``segments``'). It streams: the object is built in a
temporary file, its pieces read and copied a ``segments.CHUNK`` at a time, so what it holds in
memory does not grow with the objects (a compacted object holds up to ``compact_rows`` rows).

``NoSuchName`` from ``read_contents`` or ``read_all`` means an object listed a moment ago was
deleted since (a compaction's clean-up): read the contents again.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import BinaryIO

import attrs

from codemojex.audit import compaction, segments
from codemojex.audit.compaction import Contents
from codemojex.audit.replica import Replica

__all__ = ["Compaction", "build_compaction", "read_contents", "read_header"]


@attrs.frozen
class Compaction:
    """A compacted object to create (``piece`` names it, ``header`` is its first line; its bytes
    are in ``file``, a temporary file the caller closes), then the manifest that names it."""

    file: BinaryIO
    header: segments.CompactedHeader
    piece: segments.Piece
    manifest: segments.Manifest
    merged: int  # the manifest's last objects it took in


def read_header(replica: Replica, name: str) -> segments.Header | segments.CompactedHeader:
    """The header of a segment or a compacted object, reading no more than its first chunk
    (``ValueError`` when it is neither)."""
    with replica.reader(name) as f:
        return segments.header_of(f.read(segments.CHUNK))


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
    scratch: Path | None = None,
) -> Compaction | None:
    """The next compaction of the replica whose ``contents`` were just read, by a writer of
    ``epoch``: the segments after the newest manifest, in order, until they hold
    ``compact_rows`` rows or are ``max_segments`` (at least one segment), with the manifest's
    last objects they take in (``compaction.tail_to_merge``). ``None`` when no segment follows
    the manifest. A longer backlog (a replica that was never compacted) takes several rounds.
    Its temporary files are made in ``scratch`` (default: the system's); ``ValueError`` when a
    piece is not what it should be."""
    out = tempfile.TemporaryFile(dir=scratch)  # noqa: SIM115 (the caller closes it)
    try:
        built = _merge_into(out, replica, contents, epoch, compact_rows, max_segments, scratch)
    except BaseException:
        out.close()
        raise
    if built is None:
        out.close()
        return None
    header, merged = built
    out.flush()
    out.seek(0)
    piece = segments.Piece.of(header)
    manifest = compaction.next_manifest(contents.manifest, epoch, merged, piece, header.last_seq)
    return Compaction(out, header, piece, manifest, merged)


def _merge_into(
    out: BinaryIO,
    replica: Replica,
    contents: Contents,
    epoch: int,
    compact_rows: int,
    max_segments: int | None,
    scratch: Path | None,
) -> tuple[segments.CompactedHeader, int] | None:
    """``build_compaction``'s object, written to ``out``: its header, and how many of the
    manifest's last objects it took in."""
    with (
        tempfile.TemporaryFile(dir=scratch) as late,
        tempfile.TemporaryFile(dir=scratch) as early,
    ):
        batch = segments.Bodies(late)  # the segments, read first: they decide the tail
        taken = 0
        for name in contents.after[:max_segments]:
            with replica.reader(name) as f:
                batch.add(f)
            taken += 1
            if batch.rows >= compact_rows:
                break
        if not taken:
            return None
        objects = () if contents.manifest is None else contents.manifest.objects
        merged = compaction.tail_to_merge(objects, batch.rows, compact_rows)
        tail = objects[len(objects) - merged :]
        kept = segments.Bodies(early)  # the manifest's last objects, which come before them
        for piece in tail:
            with replica.reader(piece.name) as f:
                kept.add(f)
        first = tail[0].first_segment if tail else segments.span(contents.after[0])[0]
        last = segments.span(contents.after[taken - 1])[1]
        return segments.write_compacted(first, last, epoch, [kept, batch], out), merged
