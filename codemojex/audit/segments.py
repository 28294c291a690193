"""The replica's layout and the segment format (pure): the one place that writes and reads them.

A replica holds two folders of create-only objects:

* ``epochs/<n>``: one per archiver start that claimed the replica, ``{"epoch": n, "archiver":
  <name>}``; the newest epoch's holder is the only writer, older ones are fenced.
* ``segments/<n>.jsonl``: committed rows, cut in order. A header line, then one row per line,
  each a JSON object::

      {"segment": 3, "epoch": 1, "first_seq": 2001, "last_seq": 3000, "rows": 1000}
      {"seq": 2001, "notice_id": "NOT...", "job_id": "JOB...", "chat": 42, ...}

  ``seq`` is the row's number in the archive; a row's other fields are ``AuditRow``'s.

Numbers are written with 20 digits, so names sort as numbers do.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import Any

import attrs
from cattrs.preconf.json import make_converter

from codemojex.audit.rows import AuditRow

__all__ = [
    "EPOCHS",
    "SEGMENTS",
    "EpochClaim",
    "Header",
    "Segment",
    "decode",
    "decode_header",
    "encode",
    "encode_epoch",
    "epoch_name",
    "number",
    "segment_name",
]

EPOCHS = "epochs/"
SEGMENTS = "segments/"

_converter = make_converter(forbid_extra_keys=False)


@attrs.frozen
class Header:
    segment: int  # its number
    epoch: int  # the epoch of the archiver that wrote it
    first_seq: int
    last_seq: int
    rows: int


@attrs.frozen
class Segment:
    header: Header
    rows: tuple[tuple[int, AuditRow], ...]  # (seq, row), in order


@attrs.frozen
class EpochClaim:
    epoch: int
    archiver: str


def segment_name(n: int) -> str:
    return f"{SEGMENTS}{n:020d}.jsonl"


def epoch_name(n: int) -> str:
    return f"{EPOCHS}{n:020d}"


def number(name: str) -> int:
    """The number of a segment or epoch name (``segments/000…3.jsonl`` is 3)."""
    return int(PurePosixPath(name).name.split(".")[0])


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
    rows = []
    for line in rest:
        if line.strip():
            fields: dict[str, Any] = _structure(line, dict[str, Any], "segment row")
            seq = fields.pop("seq", None)
            if not isinstance(seq, int):
                raise ValueError(f"not a segment row (no seq): {line[:80]!r}")
            rows.append((seq, _converter.structure(fields, AuditRow)))
    return Segment(decode_header(first.encode()), tuple(rows))


def encode_epoch(n: int, archiver: str) -> bytes:
    return _converter.dumps(EpochClaim(n, archiver)).encode()


def _structure(text: bytes | str, kind: Any, what: str) -> Any:
    try:
        return _converter.loads(text, kind)
    except Exception as exc:  # cattrs and json raise several kinds; all mean "not one"
        raise ValueError(f"not a {what}: {exc}") from exc
