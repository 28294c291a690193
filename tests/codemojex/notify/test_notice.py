"""The notice's payload and the delivery note, as the worker writes them and the audit reads
them (pure)."""

import json
import re

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from codemojex.audit import fold
from codemojex.notify.notice import (
    DeliveryNote,
    Notice,
    check_notice,
    decode,
    decode_note,
    encode,
    encode_note,
)
from codemojex.telegram import MAX_TEXT, MAX_TEXT_BYTES
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


def test_a_notice_with_a_parse_mode_must_parse_and_is_measured_as_shown() -> None:
    check_notice(1, "<b>" + "x" * MAX_TEXT + "</b>", {"parse_mode": "HTML"})  # markup is free
    for text, opts, words in (
        ("<b>" + "x" * (MAX_TEXT + 1) + "</b>", {"parse_mode": "HTML"}, "4097 UTF-16 units"),
        ("Tom <the great>", {"parse_mode": "HTML"}, 'parse as HTML: Unsupported start tag "the"'),
        ("1.5", {"parse_mode": "MarkdownV2"}, "Character '.' is reserved"),
        ("<b> </b>", {"parse_mode": "html"}, "non-empty"),
        ("x", {"parse_mode": "Klingon"}, "parse_mode must be one of"),
        ("&amp;" * 7000, {"parse_mode": "HTML"}, f"over {MAX_TEXT_BYTES} bytes"),
    ):
        with pytest.raises(ValueError, match=re.escape(words)):
            check_notice(1, text, opts)
    check_notice(1, "Tom <the great>", {})  # no parse mode: plain text, nothing to parse
