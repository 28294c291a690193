"""The replica's names and the segment format (pure): what every replica already holds must
still read back, and what is not a segment is refused."""

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
