"""The notice's payload and the delivery note, as the worker writes them and the audit reads
them (pure)."""

import json

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from codemojex.audit import fold
from codemojex.notify.notice import DeliveryNote, Notice, decode, decode_note, encode, encode_note
from echomq_trio.audit import AuditOutcome, AuditRecord


def test_the_delivery_note_is_chat_and_message_id() -> None:
    text = encode_note(DeliveryNote(-1009, 42))
    assert json.loads(text) == {"chat": -1009, "message_id": 42}
    assert decode_note(text) == DeliveryNote(-1009, 42)
    assert decode_note(b'{"chat": 5, "message_id": null}') == DeliveryNote(5, None)


@given(st.integers(-(2**52), 2**52), st.one_of(st.none(), st.integers(1, 2**31)))
def test_a_note_survives_its_round_trip(chat: int, message_id: int | None) -> None:
    note = DeliveryNote(chat, message_id)
    assert decode_note(encode_note(note)) == note


@pytest.mark.parametrize("text", ["", "not json", "[]", '{"message_id": 3}', '{"chat": "x"}'])
def test_what_is_not_a_note_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a delivery note"):
        decode_note(text)


def test_the_fold_reads_the_note_the_worker_writes() -> None:
    notice = Notice(chat=-100, text="hi", id="NOT0ST3A7fpq0Q")
    record = AuditRecord(
        "1-0",
        "JOB0ST3A7fpq0Q",
        AuditOutcome.ACKED,
        1,
        9,
        encode(notice).encode(),
        encode_note(DeliveryNote(-1009, 7)),
        "",
    )
    (row,) = fold([record])
    assert (row.chat, row.message_id, row.notice_id) == (-1009, 7, notice.id)  # migrated
    dropped_record = attrs.evolve(record, outcome=AuditOutcome.DROPPED, note="", error="blocked")
    (dropped,) = fold([dropped_record])
    assert (dropped.chat, dropped.message_id) == (-100, None)  # the payload's chat
    assert decode(encode(notice)) == notice


def test_a_due_time_travels_only_when_given() -> None:
    plain = Notice(chat=1, text="now", id="NOT0ST3A7fpq0Q")
    assert "due_ms" not in json.loads(encode(plain))
    later = attrs.evolve(plain, due_ms=1_796_035_496_083)
    assert json.loads(encode(later))["due_ms"] == 1_796_035_496_083
    assert decode(encode(later)) == later and decode(encode(plain)) == plain
