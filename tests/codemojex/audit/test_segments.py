"""The replica's names and formats (pure): segments, compacted objects and manifests; what every
replica already holds must still read back, and what is not one is refused."""

import io

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from codemojex.audit import segments
from codemojex.audit.rows import AuditRow

ROW = AuditRow("NOT0ST3A7fpq01", "JOB0ST3A7fpq01", -100, "delivered", 5, 1, None, 1, 10, "hi")

# Segment 2 of epoch 3 holding one row, byte for byte as archivers have always written it.
WRITTEN = (
    b'{"segment": 2, "epoch": 3, "first_seq": 7, "last_seq": 7, "rows": 1}\n'
    b'{"seq": 7, "notice_id": "NOT0ST3A7fpq01", "job_id": "JOB0ST3A7fpq01", "chat": -100, '
    b'"outcome": "delivered", "message_id": 5, "attempts": 1, "reason": null, '
    b'"enqueued_ms": 1, "settled_ms": 10, "text": "hi"}\n'
)


def test_a_segment_is_a_header_line_then_a_row_per_line() -> None:
    assert segments.encode(2, 3, [(7, ROW)]) == WRITTEN
    segment = segments.decode(WRITTEN)
    assert segment.header == segments.Header(segment=2, epoch=3, first_seq=7, last_seq=7, rows=1)
    assert segment.rows == ((7, ROW),)
    assert segments.decode_header(WRITTEN) == segment.header


rows = st.builds(
    AuditRow,
    notice_id=st.text(min_size=1, max_size=20),
    job_id=st.text(max_size=20),
    chat=st.one_of(st.none(), st.integers(-(2**52), 2**52)),
    outcome=st.sampled_from(["delivered", "dropped", "dead"]),
    message_id=st.one_of(st.none(), st.integers(1, 2**31)),
    attempts=st.integers(0, 10),
    reason=st.one_of(st.none(), st.text(max_size=40)),
    enqueued_ms=st.one_of(st.none(), st.integers(0, 2**43)),
    settled_ms=st.integers(0, 2**43),
    text=st.one_of(st.none(), st.text(max_size=60)),
)


@given(st.lists(rows, min_size=1, max_size=5), st.integers(1, 10**6), st.integers(1, 100))
def test_every_segment_reads_back_as_written(
    batch: list[AuditRow], first_seq: int, epoch: int
) -> None:
    numbered = list(enumerate(batch, first_seq))
    segment = segments.decode(segments.encode(9, epoch, numbered))
    assert segment.rows == tuple(numbered)
    assert segment.header == segments.Header(9, epoch, first_seq, numbered[-1][0], len(batch))


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not json\n",
        b'{"segment": 1, "last_seq": 0}\n',  # a header without its epoch: not this format
        b'{"segment": 1, "epoch": 1, "first_seq": 1, "last_seq": 1, "rows": 1}\n{"text": "x"}\n',
        b'{"segment": 1, "epoch": 1, "first_seq": 1, "last_seq": 1, "rows": 1}\n[1, 2]\n',
    ],
)
def test_what_is_not_a_segment_is_refused(data: bytes) -> None:
    with pytest.raises(ValueError, match="not a segment"):
        segments.decode(data)


def test_a_header_is_read_alone_and_an_empty_segment_is_never_written() -> None:
    header_only = segments.decode_header(WRITTEN.split(b"\n")[0])
    assert (header_only.epoch, header_only.last_seq) == (3, 7)
    with pytest.raises(ValueError, match="not a segment header"):
        segments.decode_header(b'{"segment": 1, "last_seq": 0}\n')
    with pytest.raises(ValueError, match="at least one row"):
        segments.encode(1, 1, [])


def test_names_sort_as_their_numbers_do() -> None:
    assert segments.segment_name(3) == "segments/00000000000000000003.jsonl"
    assert segments.epoch_name(12) == "epochs/00000000000000000012"
    names = [segments.segment_name(n) for n in (10, 9, 100, 1)]
    assert [segments.number(n) for n in sorted(names)] == [1, 9, 10, 100]
    assert segments.number(segments.epoch_name(12)) == 12
    assert segments.encode_epoch(2, "host-1") == b'{"epoch": 2, "archiver": "host-1"}'


# --- compacted objects and manifests -------------------------------------------------------------

ROW2 = attrs.evolve(ROW, notice_id="NOT0ST3A7fpq02", text="ho")
# Segments 4 and 5 compacted: segment 2's row line, then one more, under one header.
COMPACTED = (
    b'{"first_segment": 4, "last_segment": 5, "epoch": 2, "first_seq": 7, "last_seq": 9, '
    b'"rows": 2}\n' + WRITTEN.split(b"\n", 1)[1] + b'{"seq": 9, "notice_id": "NOT0ST3A7fpq02", '
    b'"job_id": "JOB0ST3A7fpq01", "chat": -100, "outcome": "delivered", "message_id": 5, '
    b'"attempts": 1, "reason": null, "enqueued_ms": 1, "settled_ms": 10, "text": "ho"}\n'
)


def test_a_compacted_object_is_its_pieces_row_lines_under_one_header() -> None:
    data, header = segments.merge(4, 5, 2, [segments.encode(4, 1, [(7, ROW)]),
                                            segments.encode(5, 1, [(9, ROW2)])])  # fmt: skip
    assert data == COMPACTED
    assert header == segments.CompactedHeader(4, 5, 2, 7, 9, 2) == segments.header_of(data)
    assert segments.decode_rows(data) == ((7, ROW), (9, ROW2))
    assert segments.decode_rows(WRITTEN) == ((7, ROW),)  # a segment reads the same way
    piece = segments.Piece.of(header)
    assert piece == segments.Piece("compacted/00000000000000000004-00000000000000000005.jsonl",
                                   4, 5, 2)  # fmt: skip
    assert segments.span(piece.name) == (4, 5) and segments.span(segments.segment_name(3)) == (3, 3)
    # A compacted object merges again like a segment: its rows, as they are.
    again, _ = segments.merge(4, 6, 3, [data, segments.encode(6, 3, [(10, ROW)])])
    assert segments.decode_rows(again) == ((7, ROW), (9, ROW2), (10, ROW))
    with pytest.raises(ValueError, match="not a segment header"):
        segments.decode_header(data)  # a compacted object is not a segment


@given(st.lists(st.lists(rows, min_size=1, max_size=4), min_size=1, max_size=5),
       st.integers(1, 10**6))  # fmt: skip
def test_merged_pieces_read_back_as_their_rows_in_order(pieces: list[list[AuditRow]],
                                                       first_seq: int) -> None:  # fmt: skip
    encoded, numbered, seq = [], [], first_seq
    for n, batch in enumerate(pieces, 1):
        rows_of_piece = list(enumerate(batch, seq))
        seq += len(batch) + 1  # a gap: a row replaced later has a newer number
        encoded.append(segments.encode(n, 1, rows_of_piece))
        numbered += rows_of_piece
    data, header = segments.merge(1, len(pieces), 7, encoded)
    assert segments.decode_rows(data) == tuple(numbered)
    assert (header.first_seq, header.last_seq, header.rows) == (
        first_seq, numbered[-1][0], len(numbered),
    )  # fmt: skip


class Trickle:
    """A piece read a few bytes at a time: every chunk boundary a long object has, in small."""

    def __init__(self, data: bytes, step: int) -> None:
        self.data, self.step, self.at = data, step, 0

    def read(self, size: int, /) -> bytes:
        part = self.data[self.at : self.at + min(size, self.step)]
        self.at += len(part)
        return part


@given(st.lists(st.lists(rows, min_size=1, max_size=4), min_size=1, max_size=4),
       st.integers(1, 300), st.booleans())  # fmt: skip
def test_a_merge_streamed_in_small_parts_is_the_merge_in_one(
    pieces: list[list[AuditRow]], step: int, last_newline: bool
) -> None:
    encoded, seq = [], 1
    for n, batch in enumerate(pieces, 1):
        encoded.append(segments.encode(n, 1, list(enumerate(batch, seq))))
        seq += len(batch)
    if not last_newline:  # a last line without its newline reads the same
        encoded[-1] = encoded[-1].removesuffix(b"\n")
    whole, header = segments.merge(1, len(pieces), 7, encoded)
    bodies = segments.Bodies(io.BytesIO())
    read = [bodies.add(Trickle(data, step)) for data in encoded]
    out = io.BytesIO()
    assert segments.write_compacted(1, len(pieces), 7, [bodies], out) == header
    assert out.getvalue() == whole
    assert read == [segments.header_of(data) for data in encoded]


@given(st.lists(rows, min_size=1, max_size=8), st.integers(1, 300))
def test_rows_read_in_small_parts_are_the_rows(batch: list[AuditRow], step: int) -> None:
    numbered = tuple(enumerate(batch, 1))
    data = segments.encode(1, 1, numbered)
    assert tuple(r for part in segments.read_rows(Trickle(data, step)) for r in part) == numbered
    short = data.replace(f'"rows": {len(batch)}'.encode(), f'"rows": {len(batch) + 1}'.encode())
    with pytest.raises(ValueError, match="rows, its header says"):
        list(segments.read_rows(Trickle(short, step)))


@pytest.mark.parametrize(
    ("pieces", "words"),
    [
        ([], "at least one row"),
        ([WRITTEN, WRITTEN], "out of order"),  # the same rows twice
        ([WRITTEN.replace(b'"rows": 1', b'"rows": 2')], "do not match its header"),
        ([WRITTEN.replace(b'"last_seq": 7', b'"last_seq": 8')], "do not match its header"),
        ([b"not a segment\n"], "not a segment header"),
        ([WRITTEN.split(b"\n")[0]], "no row after its header"),
        ([WRITTEN.replace(b"\n{", b"\n\n{")], "do not match its header"),  # an empty line
    ],
)
def test_merge_refuses_pieces_that_are_not_what_they_say(pieces: list[bytes], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        segments.merge(1, 1, 1, pieces)


def test_a_manifest_names_the_objects_in_order() -> None:
    piece = segments.Piece(segments.compacted_name(1, 5), 1, 5, 40)
    manifest = segments.Manifest(3, 2, 5, 40, (piece,))
    data = segments.encode_manifest(manifest)
    assert data == (
        b'{"manifest": 3, "epoch": 2, "last_segment": 5, "last_seq": 40, "objects": [{"name": '
        b'"compacted/00000000000000000001-00000000000000000005.jsonl", "first_segment": 1, '
        b'"last_segment": 5, "rows": 40}]}'
    )
    assert segments.decode_manifest(data) == manifest
    assert segments.manifest_name(3) == "manifests/00000000000000000003.json"
    assert segments.number(segments.manifest_name(3)) == 3
    with pytest.raises(ValueError, match="not a manifest"):
        segments.decode_manifest(b'{"manifest": 3}')
    with pytest.raises(ValueError, match="not a segment or a compacted object"):
        segments.span(segments.manifest_name(3))
    with pytest.raises(ValueError, match="rows, its header says"):
        segments.decode_rows(WRITTEN.replace(b'"rows": 1', b'"rows": 3'))
