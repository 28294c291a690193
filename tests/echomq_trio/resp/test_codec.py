"""The RESP codec without a server: requests to bytes, bytes to replies paired in order with
their requests, whatever the split of the stream; push frames apart; error replies as values."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from echomq_trio.resp._codec import Codec, ProtocolError, ReplyError, encode

REPLIES = (
    b"+OK\r\n"  # the OK status: "OK", as the other transport gives it
    b"$3\r\nabc\r\n"
    b":-42\r\n"
    b"_\r\n"
    b",1.5\r\n"
    b"#f\r\n"  # RESP3 false: a reply, not "no data yet"
    b"%1\r\n$1\r\nk\r\n*2\r\n:1\r\n$0\r\n\r\n"
    b"-ERR wrong number of arguments\r\n"
    b"*2\r\n+PONG\r\n$-1\r\n"
)
EXPECTED = ["OK", b"abc", -42, None, 1.5, False, {b"k": [1, b""]}, "ERR", [b"PONG", None]]


def _check(pairs: list[tuple[int, object]]) -> None:
    assert [w for w, _ in pairs] == list(range(len(EXPECTED)))
    for (_, got), want in zip(pairs, EXPECTED, strict=True):
        if want == "ERR":
            assert isinstance(got, ReplyError)
            assert str(got) == "ERR wrong number of arguments"
        else:
            assert got == want
            assert type(got) is type(want)


def test_requests_are_arrays_of_bulk_strings_sent_together() -> None:
    codec: Codec[int] = Codec()
    assert codec.data_to_send() == b""
    codec.send(("SET", b"k\r\n", "v"), 1)
    codec.send(("GET", "k"), 2)
    assert codec.data_to_send() == (
        b"*3\r\n$3\r\nSET\r\n$3\r\nk\r\n\r\n$1\r\nv\r\n" + b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"
    )
    assert codec.data_to_send() == b""
    assert codec.in_flight == 2
    assert encode(["PING"]) == b"*1\r\n$4\r\nPING\r\n"


def test_replies_are_paired_in_order_with_their_requests() -> None:
    codec: Codec[int] = Codec()
    for i in range(len(EXPECTED)):
        codec.send(("X",), i)
    _check(codec.receive_data(REPLIES))
    assert codec.in_flight == 0


@given(st.lists(st.integers(min_value=1, max_value=len(REPLIES) - 1), max_size=12, unique=True))
def test_a_reply_split_across_reads_anywhere_comes_out_whole(cuts: list[int]) -> None:
    codec: Codec[int] = Codec()
    for i in range(len(EXPECTED)):
        codec.send(("X",), i)
    bounds = [0, *sorted(cuts), len(REPLIES)]
    pairs = []
    for a, b in itertools.pairwise(bounds):
        pairs += codec.receive_data(REPLIES[a:b])
    _check(pairs)


def test_push_frames_take_no_request_and_are_kept_apart() -> None:
    codec: Codec[str] = Codec()
    codec.send(("GET", "k"), "get")
    got = codec.receive_data(b">3\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n$1\r\nx\r\n")
    assert got == []
    assert list(codec.pushes) == [[b"invalidate", [b"k"], b"x"]]
    assert codec.receive_data(b"$1\r\nv\r\n") == [("get", b"v")]


def test_a_subscriber_takes_every_frame_as_a_push_in_resp2_and_resp3() -> None:
    codec: Codec[None] = Codec(subscriber=True)
    codec.receive_data(b"*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$2\r\nhi\r\n")
    codec.receive_data(b">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$2\r\nho\r\n")
    assert list(codec.pushes) == [[b"message", b"c", b"hi"], [b"message", b"c", b"ho"]]


def test_a_reply_nobody_asked_for_is_a_protocol_error() -> None:
    codec: Codec[int] = Codec()
    with pytest.raises(ProtocolError, match="no request asked for"):
        codec.receive_data(b"+OK\r\n")


def test_bytes_that_are_not_resp_are_a_protocol_error() -> None:
    codec: Codec[int] = Codec()
    codec.send(("X",), 1)
    with pytest.raises(ProtocolError, match="not RESP"):
        codec.receive_data(b"HTTP/1.1 400 Bad Request\r\n")


def test_take_waiting_hands_back_every_request_in_flight_and_drops_unsent_bytes() -> None:
    codec: Codec[int] = Codec()
    codec.send(("A",), 1)
    codec.send(("B",), 2)
    assert codec.take_waiting() == [1, 2]
    assert codec.in_flight == 0
    assert codec.data_to_send() == b""
