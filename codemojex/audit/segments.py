"""The replica's layout and its formats (pure): the one place that writes and reads them.

A replica holds four folders of create-only objects (never overwritten; superseded ones are
deleted by compaction, see ``compaction``):

* ``epochs/<n>``: one per archiver start that claimed the replica, ``{"epoch": n, "archiver":
  <name>}``; the newest epoch's holder is the only writer, older ones are fenced.
* ``segments/<n>.jsonl``: committed rows, cut in order. A header line, then one row per line,
  each a JSON object::

      {"segment": 3, "epoch": 1, "first_seq": 2001, "last_seq": 3000, "rows": 1000}
      {"seq": 2001, "notice_id": "NOT...", "job_id": "JOB...", "chat": 42, ...}

  ``seq`` is the row's number in the archive; a row's other fields are ``AuditRow``'s.
  ``deliveries`` is written only when it is not what the outcome implies (1 for delivered, 0
  otherwise: a notice sent again, or acked unsent), so rows read as they always were, and a
  row written before the count existed reads as its outcome implies.
* ``compacted/<first>-<last>.jsonl``: segments ``first`` to ``last`` merged into one object: the
  same row lines, in the same order, under one header::

      {"first_segment": 1, "last_segment": 200, "epoch": 2, "first_seq": 1, "last_seq": 9000,
       "rows": 9000}

  Its content follows from its name (the rows of those segments, in order), so two writers of
  one name write the same rows.
* ``manifests/<n>.json``: which objects make up the archive up to a segment, in order::

      {"manifest": 4, "epoch": 2, "last_segment": 800, "last_seq": 36000, "objects": [
        {"name": "compacted/…1-…600.jsonl", "first_segment": 1, "last_segment": 600,
         "rows": 27000}, ...]}

  The archive is the newest manifest's objects, then every segment after its ``last_segment``.

Numbers are written with 20 digits, so names sort as numbers do.
"""

from __future__ import annotations

import io
import shutil
from collections.abc import Iterable, Iterator, Sequence
from pathlib import PurePosixPath
from typing import Any, BinaryIO

import attrs
from cattrs.gen import make_dict_unstructure_fn, override
from cattrs.preconf.json import make_converter

from codemojex.audit.replica import Readable
from codemojex.audit.rows import AuditRow

__all__ = [
    "CHUNK",
    "COMPACTED",
    "EPOCHS",
    "MANIFESTS",
    "SEGMENTS",
    "Bodies",
    "CompactedHeader",
    "EpochClaim",
    "Header",
    "Manifest",
    "Piece",
    "Segment",
    "compacted_name",
    "decode",
    "decode_header",
    "decode_manifest",
    "decode_rows",
    "encode",
    "encode_epoch",
    "encode_manifest",
    "epoch_name",
    "header_of",
    "manifest_name",
    "merge",
    "number",
    "read_rows",
    "segment_name",
    "span",
    "write_compacted",
]

EPOCHS = "epochs/"
SEGMENTS = "segments/"
COMPACTED = "compacted/"
MANIFESTS = "manifests/"
CHUNK = 1 << 16  # bytes a merge or a restore reads and writes at a time

_converter = make_converter(forbid_extra_keys=False)
_converter.register_unstructure_hook(
    AuditRow,
    make_dict_unstructure_fn(AuditRow, _converter, deliveries=override(omit_if_default=True)),
)


@attrs.frozen
class Header:
    segment: int  # its number
    epoch: int  # the epoch of the archiver that wrote it
    first_seq: int
    last_seq: int
    rows: int


@attrs.frozen
class CompactedHeader:
    first_segment: int  # the segments it holds, first to last
    last_segment: int
    epoch: int  # the epoch of the archiver that wrote it
    first_seq: int
    last_seq: int
    rows: int


@attrs.frozen
class Segment:
    header: Header
    rows: tuple[tuple[int, AuditRow], ...]  # (seq, row), in order


@attrs.frozen
class Piece:
    """An object a manifest names: a compacted object holding segments first to last."""

    name: str
    first_segment: int
    last_segment: int
    rows: int

    @classmethod
    def of(cls, header: CompactedHeader) -> Piece:
        """The piece a compacted object is, by its header."""
        first, last = header.first_segment, header.last_segment
        return cls(compacted_name(first, last), first, last, header.rows)


@attrs.frozen
class Manifest:
    """The archive up to segment ``last_segment`` (row ``last_seq``): ``objects``, in order."""

    manifest: int  # its number
    epoch: int  # the epoch of the archiver that wrote it
    last_segment: int
    last_seq: int
    objects: tuple[Piece, ...]


@attrs.frozen
class EpochClaim:
    epoch: int
    archiver: str


def segment_name(n: int) -> str:
    return f"{SEGMENTS}{n:020d}.jsonl"


def epoch_name(n: int) -> str:
    return f"{EPOCHS}{n:020d}"


def compacted_name(first: int, last: int) -> str:
    return f"{COMPACTED}{first:020d}-{last:020d}.jsonl"


def manifest_name(n: int) -> str:
    return f"{MANIFESTS}{n:020d}.json"


def number(name: str) -> int:
    """The number of a segment, epoch or manifest name (``segments/000…3.jsonl`` is 3)."""
    return int(PurePosixPath(name).name.split(".")[0])


def span(name: str) -> tuple[int, int]:
    """The segments an object holds: ``(n, n)`` for segment ``n``, ``(first, last)`` for a
    compacted object; ``ValueError`` for another name."""
    stem = PurePosixPath(name).name.split(".")[0]
    if name.startswith(SEGMENTS):
        return int(stem), int(stem)
    if name.startswith(COMPACTED):
        first, _, last = stem.partition("-")
        return int(first), int(last)
    raise ValueError(f"not a segment or a compacted object: {name!r}")


def encode(n: int, epoch: int, rows: Sequence[tuple[int, AuditRow]]) -> bytes:
    """Segment ``n`` of ``epoch`` holding ``rows`` ((seq, row) pairs, in order; not empty)."""
    if not rows:
        raise ValueError("a segment holds at least one row")
    header = Header(n, epoch, rows[0][0], rows[-1][0], len(rows))
    lines = [_converter.dumps(header)]
    lines += [_converter.dumps({"seq": seq, **_converter.unstructure(row)}) for seq, row in rows]
    return ("\n".join(lines) + "\n").encode()


def decode_header(data: bytes) -> Header:
    """The header of a segment; ``ValueError`` when its first line is not one."""
    header: Header = _structure(data.split(b"\n", 1)[0], Header, "segment header")
    return header


def decode(data: bytes) -> Segment:
    """A whole segment; ``ValueError`` when any line is not what it should be."""
    lines = data.decode().splitlines()
    if not lines:
        raise ValueError("not a segment: it is empty")
    first, *rest = lines
    return Segment(decode_header(first.encode()), _rows(rest))


def _rows(lines: Iterable[str]) -> tuple[tuple[int, AuditRow], ...]:
    rows = []
    for line in lines:
        if line.strip():
            fields: dict[str, Any] = _structure(line, dict[str, Any], "segment row")
            seq = fields.pop("seq", None)
            if not isinstance(seq, int):
                raise ValueError(f"not a segment row (no seq): {line[:80]!r}")
            rows.append((seq, _converter.structure(fields, AuditRow)))
    return tuple(rows)


def header_of(data: bytes) -> Header | CompactedHeader:
    """The header of a segment or a compacted object; ``ValueError`` when it is neither."""
    first = data.split(b"\n", 1)[0]
    try:
        return decode_header(first)
    except ValueError:
        pass
    header: CompactedHeader = _structure(first, CompactedHeader, "segment header")
    return header


def decode_rows(data: bytes) -> tuple[tuple[int, AuditRow], ...]:
    """The rows of a segment or a compacted object, in order; ``ValueError`` when any line is
    not what it should be, or they are not as many as its header says."""
    return tuple(row for part in read_rows(io.BytesIO(data)) for row in part)


def read_rows(piece: Readable) -> Iterator[tuple[tuple[int, AuditRow], ...]]:
    """The rows of a segment or a compacted object, in order, read a ``CHUNK`` at a time: a
    tuple of rows per chunk, so a large object is never held whole. ``ValueError`` when a line
    is not what it should be, or (after the last rows) when they are not as many as its header
    says."""
    header: Header | CompactedHeader | None = None
    rows, rest = 0, b""
    while True:
        chunk = piece.read(CHUNK)
        data, cut = rest + chunk, len(rest + chunk)
        if chunk:  # whole lines now, the rest with the next chunk
            cut = data.rfind(b"\n") + 1
        lines, rest = data[:cut], data[cut:]
        if header is None and (b"\n" in lines or not chunk):
            head, _, lines = lines.partition(b"\n")
            header = header_of(head)
        if header is not None and lines:
            part = _rows(lines.decode().splitlines())
            rows += len(part)
            if part:
                yield part
        if not chunk:
            break
    assert header is not None  # read at the end at the latest, or header_of raised
    if rows != header.rows:
        raise ValueError(f"not a segment: {rows} rows, its header says {header.rows}")


@attrs.define
class Bodies:
    """Row lines of pieces (segments and compacted objects, in order), copied into ``out`` a
    ``CHUNK`` at a time: what a merge holds in memory is a chunk and a line, whatever the size
    of the pieces. ``add`` checks each piece's header against its lines (their count, its first
    and last ``seq``) and that its rows follow those before; ``ValueError`` otherwise."""

    out: BinaryIO
    first_seq: int = 0
    last_seq: int = 0
    rows: int = 0

    def add(self, piece: Readable) -> Header | CompactedHeader:
        """Copy ``piece``'s row lines (it is read to its end); returns its header."""
        buf = b""
        while b"\n" not in buf:  # the header line
            more = piece.read(CHUNK)
            if not more:
                header_of(buf)
                raise ValueError(f"not a segment: no row after its header {buf[:80]!r}")
            buf += more
        head, chunk = buf.split(b"\n", 1)
        header = header_of(head)
        lines, first, last, tail = 0, None, b"", b""
        while True:
            if chunk:
                self.out.write(chunk)
                lines += chunk.count(b"\n")
                seen = tail + chunk
                if first is None and b"\n" in seen:
                    first = seen.split(b"\n", 1)[0]
                end = seen.rfind(b"\n")
                if end >= 0:
                    last, tail = seen[seen.rfind(b"\n", 0, end) + 1 : end], seen[end + 1 :]
                else:
                    tail = seen
            chunk = piece.read(CHUNK)
            if not chunk:
                break
        if tail:  # a last line without its newline
            self.out.write(b"\n")
            lines, first, last = lines + 1, tail if first is None else first, tail
        if (lines != header.rows or first is None or _seq(first) != header.first_seq
                or _seq(last) != header.last_seq):  # fmt: skip
            raise ValueError(f"not a segment: its lines do not match its header {header}")
        if header.first_seq <= self.last_seq:
            raise ValueError(f"pieces out of order: seq {header.first_seq} after {self.last_seq}")
        self.first_seq = self.first_seq or header.first_seq
        self.last_seq, self.rows = header.last_seq, self.rows + header.rows
        return header


def write_compacted(
    first: int, last: int, epoch: int, parts: Sequence[Bodies], out: BinaryIO
) -> CompactedHeader:
    """Write the compacted object ``compacted_name(first, last)`` of ``epoch`` to ``out``: one
    header, then the row lines of ``parts`` (in order: their rows must follow one another),
    copied a ``CHUNK`` at a time; ``ValueError`` when they hold no row or are out of order."""
    first_seq = last_seq = rows = 0
    for part in parts:
        if not part.rows:
            continue
        if part.first_seq <= last_seq:
            raise ValueError(f"pieces out of order: seq {part.first_seq} after {last_seq}")
        first_seq = first_seq or part.first_seq
        last_seq, rows = part.last_seq, rows + part.rows
    if not rows:
        raise ValueError("a compacted object holds at least one row")
    head = CompactedHeader(first, last, epoch, first_seq, last_seq, rows)
    out.write(_converter.dumps(head).encode() + b"\n")
    for part in parts:
        part.out.seek(0)
        shutil.copyfileobj(part.out, out, CHUNK)
    return head


def merge(
    first: int, last: int, epoch: int, pieces: Sequence[bytes]
) -> tuple[bytes, CompactedHeader]:
    """The compacted object ``compacted_name(first, last)`` of ``epoch`` holding ``pieces``
    (segments and compacted objects, in order, together segments ``first`` to ``last``): their
    row lines as they are, under one header (``Bodies`` and ``write_compacted`` in memory, for
    pieces that are small)."""
    bodies = Bodies(io.BytesIO())
    for data in pieces:
        bodies.add(io.BytesIO(data))
    out = io.BytesIO()
    head = write_compacted(first, last, epoch, [bodies], out)
    return out.getvalue(), head


def _seq(line: bytes) -> int:
    fields: dict[str, Any] = _structure(line, dict[str, Any], "segment row")
    seq = fields.get("seq")
    if not isinstance(seq, int):
        raise ValueError(f"not a segment row (no seq): {line[:80]!r}")
    return seq


def encode_manifest(manifest: Manifest) -> bytes:
    return _converter.dumps(manifest).encode()


def decode_manifest(data: bytes) -> Manifest:
    """A manifest; ``ValueError`` when it is not one."""
    manifest: Manifest = _structure(data, Manifest, "manifest")
    return manifest


def encode_epoch(n: int, archiver: str) -> bytes:
    return _converter.dumps(EpochClaim(n, archiver)).encode()


def _structure(text: bytes | str, kind: Any, what: str) -> Any:
    try:
        return _converter.loads(text, kind)
    except Exception as exc:  # cattrs and json raise several kinds; all mean "not one"
        raise ValueError(f"not a {what}: {exc}") from exc
