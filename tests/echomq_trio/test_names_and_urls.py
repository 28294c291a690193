import pytest

from echomq_trio._checks import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    MAX_DELAY_MS,
    MAX_PAYLOAD_BYTES,
    MAX_TIME_MS,
    check_job_id,
    check_max_payload_bytes,
    check_ms,
    check_payload,
    check_queue,
    check_stream_id,
)
from echomq_trio.keys import queue_keys
from echomq_trio.wire import parse_url


@pytest.mark.parametrize(
    "name", ["", "a{b", "a}b", "has space", "tab\t", "new\nline", "x" * 129, 5, None]
)
def test_queue_names_that_cannot_be_hash_tags(name: object) -> None:
    with pytest.raises(ValueError, match="queue name"):
        check_queue(name)


def test_good_queue_names_and_their_keys() -> None:
    assert check_queue("cm.notify") == "cm.notify"
    assert check_queue("é" * 64) == "é" * 64  # 128 bytes exactly
    k = queue_keys("cm.notify")
    assert k.pending == "emq:{cm.notify}:pending"
    assert k.job("JOB0KHTOWnGLuC") == "emq:{cm.notify}:job:JOB0KHTOWnGLuC"


@pytest.mark.parametrize("job_id", ["NOT0KHTOWnGLuC", "JOB", "", 12, "JOB0KHTOWnGLu!"])
def test_job_ids_must_be_branded_job_ids(job_id: object) -> None:
    with pytest.raises(ValueError, match="JOB"):
        check_job_id(job_id)


def test_payload_types() -> None:
    assert check_payload("é") == "é".encode()
    assert check_payload(b"\x00") == b"\x00"
    for bad in ({"a": 1}, 5, None, ["x"]):
        with pytest.raises(TypeError, match="payload must be str or bytes"):
            check_payload(bad)


def test_url_forms() -> None:
    s = parse_url("redis://localhost")
    assert s.hosts == (("localhost", 6379),) and not s.tls and s.db == 0 and not s.cluster
    s = parse_url("rediss://user:p%40ss@h:7000/3?timeout_ms=250")
    assert (s.tls, s.username, s.password, s.db, s.timeout_ms) == (True, "user", "p@ss", 3, 250)
    s = parse_url("valkey://:secret@127.0.0.1:6380")
    assert s.password == "secret" and s.username is None and s.hosts == (("127.0.0.1", 6380),)
    s = parse_url("valkeys://a:1,b:2")
    assert s.cluster and s.tls and s.hosts == (("a", 1), ("b", 2))
    assert parse_url("redis://h:1?cluster=true").cluster
    assert "secret" not in parse_url("redis://:secret@h:1").redacted()


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("http://h:1", "scheme"),
        ("h:1", "scheme"),
        ("", "non-empty"),
        ("redis://", "no host"),
        ("redis://h:99999", "port"),
        ("redis://h:abc", "port"),
        ("redis://h:1/x", "database"),
        ("redis://h:1?cluster=maybe", "cluster"),
        ("redis://a:1,b:2/2", "cluster has only database 0"),
        ("redis://h:1?timeout_ms=0", "timeout_ms"),
        ("redis://h:1?bogus=1", "unknown"),
    ],
)
def test_bad_urls_say_what_is_wrong(url: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        parse_url(url)


@pytest.mark.parametrize(
    "url", ["http://:hunter2@h:1", "redis://:hun/ter2@h:1", "redis://u:hunter2#x@h:99999"]
)
def test_bad_url_message_hides_password(url: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_url(url)
    assert "hunter2" not in str(info.value) and "ter2" not in str(info.value)


def test_url_edge_forms() -> None:
    s = parse_url("redis://user:@h:1")
    assert (s.username, s.password) == ("user", None)
    assert parse_url("redis://secret@h").password == "secret"
    assert parse_url("redis://[::1]").hosts == (("::1", 6379),)
    assert parse_url("redis://[::1]:7000").hosts == (("::1", 7000),)


def test_times_and_delays_stop_where_scores_stop_being_exact() -> None:
    assert check_ms("run_at_ms", MAX_TIME_MS, absolute=True) == 2**53
    assert check_ms("delay_ms", MAX_DELAY_MS) == 2**53 - 2**43
    assert check_ms("lease_ms", 1, 1) == 1
    with pytest.raises(ValueError, match=r"run_at_ms must be at most 9007199254740992 \(2\*\*53"):
        check_ms("run_at_ms", MAX_TIME_MS + 1, absolute=True)
    with pytest.raises(ValueError, match=r"delay_ms must be at most 8998403161718784"):
        check_ms("delay_ms", MAX_DELAY_MS + 1)
    with pytest.raises(ValueError, match="lease_ms must be >= 1"):
        check_ms("lease_ms", 0, 1)
    for bad in (1.5, "5", True, None):
        with pytest.raises(TypeError, match="at_ms must be an int"):
            check_ms("at_ms", bad)


def test_payload_limit() -> None:
    assert check_payload("x" * DEFAULT_MAX_PAYLOAD_BYTES) == b"x" * 1_048_576
    with pytest.raises(ValueError, match="payload is 1048577 bytes, over the bus's limit of"):
        check_payload(b"x" * (DEFAULT_MAX_PAYLOAD_BYTES + 1))
    assert check_payload("éé", 4) == "éé".encode()
    with pytest.raises(ValueError, match="limit of 3 bytes"):  # counted in UTF-8 bytes
        check_payload("éé", 3)
    assert check_max_payload_bytes(MAX_PAYLOAD_BYTES) == 512 * 1024 * 1024
    for bad in (0, -1, MAX_PAYLOAD_BYTES + 1):
        with pytest.raises(ValueError, match="max_payload_bytes must be"):
            check_max_payload_bytes(bad)
    for wrong in (True, "1", 1.0):
        with pytest.raises(TypeError, match="max_payload_bytes must be an int"):
            check_max_payload_bytes(wrong)


@pytest.mark.parametrize(
    "value", ["0", "0-0", "1700000000000", "1700000000000-12", f"{2**64 - 1}-{2**64 - 1}"]
)
def test_stream_ids_the_server_takes(value: str) -> None:
    assert check_stream_id("after", value) == value


@pytest.mark.parametrize(
    "value",
    ["", "bogus", "-", "$", "+", "1-", "-1", "1-2-3", "1-*", " 1", "1.5", "١٢٣", f"{2**64}",
     f"1-{2**64}", "9" * 21],
)  # fmt: skip
def test_malformed_stream_ids(value: str) -> None:
    with pytest.raises(ValueError, match="after must be a stream id"):
        check_stream_id("after", value)


def test_stream_id_specials_are_per_call() -> None:
    assert check_stream_id("after", "-", ("-",)) == "-"
    assert check_stream_id("start", "$", ("$",)) == "$"
    with pytest.raises(ValueError, match=r"or '\$', got '-'"):
        check_stream_id("start", "-", ("$",))
    with pytest.raises(TypeError, match="after must be a str stream id"):
        check_stream_id("after", 5)
