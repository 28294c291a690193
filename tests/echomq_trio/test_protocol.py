"""The script protocol without a server: calls built from typed arguments carry them in the places
each script's header names, every key is a declared key of the queue, bad input is refused, and
replies in each script's documented shape parse back into the typed results (round trips)."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from echomq_trio import cron, ids, protocol, sequence
from echomq_trio._checks import MAX_DELAY_MS, MAX_TIME_MS, PRIORITY_MAX, PRIORITY_MIN
from echomq_trio.keys import QueueKeys, queue_keys
from echomq_trio.protocol import Call
from echomq_trio.results import (
    Acknowledged,
    Admitted,
    AuditOutcome,
    AuditRecord,
    ClockCarried,
    Counts,
    CronDue,
    Fired,
    Job,
    JobInfo,
    LanePage,
    LaneStatus,
    Outcome,
    Reaped,
    Registered,
    Registration,
)
from echomq_trio.sequence import Seq
from echomq_trio.states import JobState

SCRIPTS = Path(__file__).resolve().parents[2] / "echomq_trio" / "scripts"
MAX = 1000  # payload limit in these tests

# Names as the checks admit them: printable, no whitespace or braces (some beyond ASCII).
names = st.text(st.sampled_from("abcXYZ09-_.:+=é€😀"), min_size=1, max_size=20)
job_ids = st.integers(0, 2**63 - 1).map(lambda n: "JOB" + _base62(n))
payloads = st.one_of(st.binary(max_size=64), st.text(max_size=16))
texts = st.text(max_size=50)
tokens = st.integers(0, 2**40)
delays = st.integers(0, MAX_DELAY_MS)
times = st.integers(0, MAX_TIME_MS)
keys_of = names.map(queue_keys)
words_as_server_sends = st.sampled_from([bytes, str])


def _base62(n: int) -> str:
    out = ""
    for _ in range(11):
        n, digit = divmod(n, 62)
        out = ids.ALPHABET[digit] + out
    return out


def _bytes(p: str | bytes) -> bytes:
    return p.encode() if isinstance(p, str) else p


@functools.cache
def _header_key(script: str) -> str | None:
    """The pattern after ``emq:{q}:`` that a script's header names as KEYS[1]."""
    found = re.search(
        r"^-- KEYS\[1\] emq:\{q\}:(\S+)", (SCRIPTS / f"{script}.lua").read_text(), re.M
    )
    return found.group(1) if found else None


def _check_call(call: Call, k: QueueKeys) -> None:
    """Every call: a packaged script, one key of this queue, the one its header names."""
    assert (SCRIPTS / f"{call.script}.lua").is_file()
    (key,) = call.keys
    spec = k.spec_of(key)
    assert spec is not None, key
    if call.script != "inspect":
        assert spec.pattern == _header_key(call.script), call.script
    if call.script != "audit_ack":
        assert call.args[0] == k.prefix


# --- admissions ----------------------------------------------------------------------------------


@given(keys_of, st.lists(st.tuples(job_ids, payloads), max_size=20), st.data())
def test_enqueue_round_trip(k: QueueKeys, items: list[tuple[str, str | bytes]], data: Any) -> None:
    calls = protocol.enqueue_calls(k, items, MAX)
    assert len(calls) == (1 if items else 0)
    for call in calls:
        _check_call(call, k)
        assert call.script == "enqueue" and call.args[1:6] == ("", "", "", "", "")
        assert list(zip(call.args[6::2], call.args[7::2], strict=True)) == [
            (i, _bytes(p)) for i, p in items
        ]
    words = data.draw(st.lists(st.sampled_from(["enqueued", "duplicate"]), min_size=len(items),
                               max_size=len(items)))  # fmt: skip
    ids_ = [i for i, _ in items]
    wanted = [Admitted(i, Outcome(w)) for i, w in zip(ids_, words, strict=True)]
    assert protocol.admitted_reply([w.encode() for w in words], ids_) == wanted
    assert [a for c in calls for a in c.decode([w.encode() for w in words])] == (wanted)


def test_enqueue_goes_in_chunks() -> None:
    k = queue_keys("q")
    items = [(ids.generate("JOB"), b"") for _ in range(2 * protocol.ENQUEUE_CHUNK + 1)]
    calls = protocol.enqueue_calls(k, items, MAX)
    assert [len(c.args) for c in calls] == [6 + 2 * protocol.ENQUEUE_CHUNK] * 2 + [8]
    assert [a for c in calls for a in c.args[6::2]] == [i for i, _ in items]
    answers = [c.decode([b"enqueued"] * ((len(c.args) - 6) // 2)) for c in calls]
    assert [a.id for chunk in answers for a in chunk] == [i for i, _ in items]


def test_enqueue_of_exactly_one_chunk_is_one_call() -> None:
    k = queue_keys("q")
    items = [(ids.generate("JOB"), b"") for _ in range(protocol.ENQUEUE_CHUNK)]
    (call,) = protocol.enqueue_checked_calls(k, items)
    assert call.args == (k.prefix, "", "", "", "", "", *(a for pair in items for a in pair))
    assert protocol.enqueue_checked_calls(k, []) == []
    (timed,) = protocol.enqueue_checked_calls(k, items[:1], 250)
    assert timed.args == (k.prefix, "", "", "250", "", "", *items[0])


def test_enqueue_of_one_job_is_the_chunked_call_of_one() -> None:
    k = queue_keys("q")
    pair = (ids.generate("JOB"), b"p")
    call = protocol.enqueue_one_call(k, pair)
    assert call == protocol.enqueue_checked_calls(k, [pair])[0]
    assert call.decode([b"enqueued"]) == Admitted(pair[0], Outcome.ENQUEUED)
    assert call.decode(["duplicate"]) == Admitted(pair[0], Outcome.DUPLICATE)
    for bad in ([b"nope"], [], [b"enqueued", b"enqueued"], [[b"enqueued"]], b"enqueued"):
        with pytest.raises(ValueError):
            call.decode(bad)


@given(job_ids, payloads)
def test_checked_job_mints_an_id_or_checks_the_given_one(job_id: str, payload: str | bytes) -> None:
    assert protocol.checked_job(payload, job_id, MAX) == (job_id, _bytes(payload))
    minted = [protocol.checked_job(payload, given, MAX) for given in (None, "", None)]
    assert all(ids.is_valid(j, "JOB") and p == _bytes(payload) for j, p in minted)
    assert len({j for j, _ in minted}) == 3
    with pytest.raises(ValueError, match="branded JOB id"):
        protocol.checked_job(payload, "NOT" + job_id[3:], MAX)
    with pytest.raises(ValueError, match="branded JOB id"):  # the id is checked first
        protocol.checked_job(b"x" * (MAX + 1), "JOB", MAX)
    with pytest.raises(ValueError, match="payload is 1001 bytes"):
        protocol.checked_job(b"x" * (MAX + 1), None, MAX)
    with pytest.raises(TypeError, match="payload must be str or bytes"):
        protocol.checked_job({"a": 1}, job_id, MAX)  # type: ignore[arg-type]


@given(keys_of, job_ids, payloads, st.integers(PRIORITY_MIN, PRIORITY_MAX))
def test_a_priority_goes_to_the_scripts_as_text_and_0_as_nothing(
    k: QueueKeys, job_id: str, payload: str | bytes, priority: int
) -> None:
    (call,) = protocol.enqueue_calls(k, [(job_id, payload)], MAX, priority=priority)
    assert call.args[4] == ("" if priority == 0 else str(priority))
    (call,) = protocol.enqueue_checked_calls(k, [(job_id, _bytes(payload))], None, priority)
    assert call.args[4] == ("" if priority == 0 else str(priority))


@pytest.mark.parametrize(
    ("priority", "error"),
    [
        (PRIORITY_MAX + 1, "priority must be from -1000000 to 1000000, got 1000001"),
        (PRIORITY_MIN - 1, "priority must be from -1000000 to 1000000, got -1000001"),
        (True, "priority must be an int, got bool"),
        (1.5, "priority must be an int, got float"),
        ("3", "priority must be an int, got str"),
    ],
)
def test_a_priority_out_of_range_is_refused_in_one_line(priority: Any, error: str) -> None:
    k, job = queue_keys("q"), ids.generate("JOB")
    for build in (
        lambda: protocol.enqueue_calls(k, [(job, b"x")], MAX, priority=priority),
        lambda: protocol.enqueue_checked_calls(k, [(job, b"x")], None, priority),
        lambda: protocol.lane_enqueue_call(k, "g", [(job, b"x")], MAX, priority=priority),
        lambda: protocol.schedule_call(k, [(job, b"x", 5)], MAX, relative=True, priority=priority),
        lambda: protocol.register_call(k, "r", 1000, b"x", MAX, priority=priority),
    ):
        with pytest.raises((ValueError, TypeError), match=f"^{re.escape(error)}$"):
            build()


@given(keys_of, job_ids, payloads, names, st.integers(1, 2**40))
def test_an_idempotency_key_guards_exactly_one_job(
    k: QueueKeys, job_id: str, payload: str | bytes, key: str, ttl: int
) -> None:
    (call,) = protocol.enqueue_calls(k, [(job_id, payload)], MAX, key=key, key_ttl_ms=ttl)
    assert call.args == (k.prefix, key, str(ttl), "", "", "", job_id, _bytes(payload))
    with pytest.raises(ValueError, match="exactly one job"):
        protocol.enqueue_calls(k, [(job_id, payload)] * 2, MAX, key=key)
    with pytest.raises(ValueError, match="exactly one job"):
        protocol.lane_enqueue_call(k, "g", [], MAX, key=key)


@given(keys_of, names, st.lists(st.tuples(job_ids, payloads), min_size=1, max_size=5),
       st.none() | st.integers(1, 100))  # fmt: skip
def test_lane_enqueue_call(
    k: QueueKeys, group: str, items: list[tuple[str, str | bytes]], limit: int | None
) -> None:
    call = protocol.lane_enqueue_call(k, group, items, MAX, limit=limit)
    _check_call(call, k)
    assert call.keys == (k.lane(group),)
    assert call.args[1:12] == (group, "" if limit is None else str(limit), *[""] * 9)
    assert list(call.args[12::2]) == [i for i, _ in items]
    timed = protocol.lane_enqueue_call(k, group, items, MAX, limit=limit, timeout_ms=9)
    assert timed.args[9] == "9" and timed.args[10:] == call.args[10:]
    ranked = protocol.lane_enqueue_call(k, group, items, MAX, limit=limit, priority=-3)
    assert ranked.args[10] == "-3" and ranked.args[11:] == call.args[11:]
    expiring = protocol.lane_enqueue_call(k, group, items, MAX, limit=limit, expires="+5")
    assert expiring.args[11] == "+5" and expiring.args[12:] == call.args[12:]


@given(keys_of, job_ids, payloads, names, st.integers(0, 2**53), st.integers(1, 512),
       st.integers(1, 2**40))  # fmt: skip
def test_a_seq_guards_exactly_one_lane_job(
    k: QueueKeys, job_id: str, payload: str | bytes, scope: str, n: int, window: int, ttl: int
) -> None:
    seq = Seq(scope, n, window=window, ttl_ms=ttl)
    call = protocol.lane_enqueue_call(k, "g", [(job_id, payload)], MAX, seq=seq)
    _check_call(call, k)
    assert call.args[3:] == ("", "", scope, str(n), str(window), str(ttl), "", "", "", job_id,
                             _bytes(payload))  # fmt: skip
    with pytest.raises(ValueError, match="a seq guards exactly one job"):
        protocol.lane_enqueue_call(k, "g", [(job_id, payload)] * 2, MAX, seq=seq)
    with pytest.raises(TypeError, match="seq must be a Seq"):
        protocol.lane_enqueue_call(k, "g", [(job_id, payload)], MAX, seq=(scope, n))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("given_", "error"),
    [
        (dict(scope="", number=1), "seq scope must not be empty"),
        (dict(scope="a b", number=1), "seq scope must not contain"),
        (dict(scope="a", number=-1), "seq number must be >= 0"),
        (dict(scope="a", number=2**53 + 1), "seq number must be <= 2..53"),
        (dict(scope="a", number=True), "seq number must be an int"),
        (dict(scope="a", number=1, window=0), "seq window must be >= 1"),
        (dict(scope="a", number=1, window=513), "seq window must be <= 512"),
        (dict(scope="a", number=1, ttl_ms=0), "seq ttl_ms must be >= 1"),
    ],
)
def test_a_bad_seq_is_refused_in_one_line(given_: dict[str, Any], error: str) -> None:
    with pytest.raises((ValueError, TypeError), match=error):
        Seq(**given_)


@given(st.lists(st.integers(0, 60), max_size=80), st.integers(1, 8))
def test_the_seq_window_model(numbers: list[int], window: int) -> None:
    """The rule as ``sequence.admit`` keeps it: never more than the window, each number admitted
    at most once while remembered, and a number above everything remembered always admitted."""
    remembered: frozenset[int] = frozenset()
    admitted: list[int] = []
    for n in numbers:
        above = not remembered or n > max(remembered)
        ok, remembered = sequence.admit(remembered, n, window)
        assert len(remembered) <= window
        assert ok or not above
        if ok:
            assert n in remembered
            admitted.append(n)
    # What was admitted twice was forgotten in between: `window` higher numbers came after it.
    for i, n in enumerate(admitted):
        if n in admitted[i + 1 :]:
            later = admitted[i + 1 : admitted.index(n, i + 1)]
            assert len({m for m in later if m > n}) >= window


@given(keys_of, st.lists(st.tuples(job_ids, payloads, delays), max_size=5), st.booleans(),
       st.none() | names, st.data())  # fmt: skip
def test_schedule_round_trip(
    k: QueueKeys, items: list[tuple[str, str | bytes, int]], relative: bool, group: Any, data: Any
) -> None:
    call = protocol.schedule_call(k, items, MAX, relative=relative, group=group)
    _check_call(call, k)
    assert call.args[1:6] == ("in" if relative else "at", group or "", "", "", "")
    assert list(call.args[8::3]) == [str(t) for _, _, t in items]
    timed = protocol.schedule_call(k, items, MAX, relative=relative, group=group, timeout_ms=7)
    assert timed.args[3] == "7" and timed.args[4:] == call.args[4:]
    ranked = protocol.schedule_call(k, items, MAX, relative=relative, group=group, priority=5)
    assert ranked.args[4] == "5" and ranked.args[5:] == call.args[5:]
    answers = data.draw(st.lists(st.one_of(st.tuples(st.just("scheduled"), times),
                                           st.tuples(st.just("duplicate"))),
                                 min_size=len(items), max_size=len(items)))  # fmt: skip
    raw = [[a[0].encode(), *a[1:]] for a in answers]
    assert protocol.schedule_reply(raw, [i for i, _, _ in items]) == [
        Admitted(i, Outcome.SCHEDULED, a[1]) if len(a) > 1 else Admitted(i, Outcome.DUPLICATE)
        for (i, _, _), a in zip(items, answers, strict=True)
    ]


@given(st.lists(st.one_of(payloads, st.tuples(job_ids, payloads)), max_size=10))
def test_with_ids_mints_an_id_for_each_bare_payload(items: list[Any]) -> None:
    pairs = protocol.with_ids(items)
    assert [p for _, p in pairs] == [i[1] if isinstance(i, tuple) else i for i in items]
    for (job_id, _), item in zip(pairs, items, strict=True):
        if isinstance(item, tuple):
            assert job_id == item[0]
        else:
            assert ids.is_valid(job_id, "JOB")
    minted = [j for (j, _), i in zip(pairs, items, strict=True) if not isinstance(i, tuple)]
    assert len(set(minted)) == len(minted)
    given_id = ids.generate("JOB")
    assert protocol.with_ids(["x"], given_id) == [(given_id, "x")]


def test_times_and_delays_are_checked_by_their_names() -> None:
    k = queue_keys("q")
    j = ids.generate("JOB")
    with pytest.raises(ValueError, match="run_at_ms must be at most"):
        protocol.schedule_call(k, [(j, "", MAX_TIME_MS + 1)], MAX, relative=False)
    with pytest.raises(ValueError, match="delay_ms must be at most"):
        protocol.schedule_call(k, [(j, "", MAX_DELAY_MS + 1)], MAX, relative=True)
    assert protocol.schedule_call(k, [(j, "", MAX_TIME_MS)], MAX, relative=False)
    with pytest.raises(ValueError, match="lease_ms must be >= 1"):
        protocol.claim_call(k, 1, 0)
    with pytest.raises(ValueError, match="at_ms must be at most"):
        protocol.lane_pause_until_call(k, "g", MAX_TIME_MS + 1)
    with pytest.raises(ValueError, match="payload is 1001 bytes"):
        protocol.enqueue_calls(k, [(j, b"x" * (MAX + 1))], MAX)
    with pytest.raises(TypeError, match="payload must be str or bytes"):
        protocol.register_call(k, "n", 1, {"a": 1}, MAX)  # type: ignore[arg-type]


@given(keys_of, st.text(max_size=20).filter(lambda s: not ids.is_valid(s, "JOB")))
def test_only_job_ids_are_admitted(k: QueueKeys, bad: str) -> None:
    for build in (
        lambda: protocol.enqueue_calls(k, [(bad, "")], MAX),
        lambda: protocol.ack_call(k, [(bad, 1)]),
        lambda: protocol.retry_call(k, bad, 1, 0, 1),
        lambda: protocol.defer_call(k, bad, 1, 0),
        lambda: protocol.replay_call(k, bad),
        lambda: protocol.inspect_ids_call(k, [bad]),
        lambda: protocol.fire_call(k, [bad]),
    ):
        with pytest.raises(ValueError, match="JOB"):
            build()


# --- claim and settling --------------------------------------------------------------------------

jobs_st = st.builds(
    Job, st.just("q"), job_ids, st.binary(max_size=50), st.integers(1, 100), tokens,
    st.just(0), st.none() | names, st.none() | st.integers(1, 2**40),
    st.just(0) | st.integers(PRIORITY_MIN, PRIORITY_MAX),
)  # fmt: skip


@given(keys_of, st.integers(1, 1000), st.integers(1, MAX_DELAY_MS), st.lists(jobs_st, max_size=8),
       times, words_as_server_sends)  # fmt: skip
def test_claim_round_trip(
    k: QueueKeys, batch: int, lease: int, claimed: list[Job], deadline: int, kind: type
) -> None:
    call = protocol.claim_call(k, batch, lease)
    _check_call(call, k)
    assert call.args[1:] == (str(batch), str(lease))
    assert protocol.claim_call(k, batch, lease, "a1b2c3").args[1:] == (str(batch), str(lease),
                                                                       "a1b2c3")  # fmt: skip
    raw: list[Any] = [deadline]
    for j in claimed:
        # options: '' or the timeout alone, as before priorities; a pair with a priority
        timeout = str(j.timeout_ms or "").encode()
        options = [timeout, j.priority] if j.priority else timeout
        raw += [kind(j.id.encode()) if kind is bytes else j.id, j.payload, j.attempts, j.token,
                (j.group or "").encode(), options]  # fmt: skip
    expected = [attrs.evolve(j, queue=k.name, lease_deadline_ms=deadline) for j in claimed]
    assert protocol.claim_reply(raw, k.name) == expected


@given(keys_of, st.lists(st.one_of(st.tuples(job_ids, tokens), st.tuples(job_ids, tokens, texts)),
                         max_size=6), st.data())  # fmt: skip
def test_ack_round_trip(k: QueueKeys, items: list[Any], data: Any) -> None:
    call = protocol.ack_call(k, items)
    _check_call(call, k)
    assert list(zip(*[iter(call.args[1:])] * 3, strict=True)) == [
        (i[0], str(i[1]), i[2] if len(i) > 2 else "") for i in items
    ]
    words = data.draw(st.lists(st.sampled_from(["acked", "stale", "gone"]), min_size=len(items),
                               max_size=len(items)))  # fmt: skip
    assert protocol.ack_reply([w.encode() for w in words]) == [Outcome(w) for w in words]


@given(keys_of, job_ids, tokens, delays, st.integers(1, 100), texts, st.booleans())
def test_retry_and_defer_calls(
    k: QueueKeys, job_id: str, token: int, delay: int, most: int, error: str, buried: bool
) -> None:
    call = protocol.retry_call(k, job_id, token, delay, most, error, buried=buried)
    _check_call(call, k)
    assert call.args[1:] == (
        job_id,
        str(token),
        str(delay),
        str(most),
        error,
        "1" if buried else "0",
    )
    call = protocol.defer_call(k, job_id, token, delay, error)
    _check_call(call, k)
    assert call.args[1:] == (job_id, str(token), str(delay), error)
    _check_call(protocol.replay_call(k, job_id), k)


@pytest.mark.parametrize("word", [o.value for o in Outcome])
def test_outcome_words_parse_by_value(word: str) -> None:
    assert protocol.outcome_reply(word.encode()) is Outcome(word)
    assert protocol.outcome_reply(word) is Outcome(word)


@given(st.text(max_size=12).filter(lambda w: w not in {o.value for o in Outcome}))
def test_an_unknown_word_is_refused(word: str) -> None:
    with pytest.raises(ValueError):
        protocol.outcome_reply(word.encode())


@given(keys_of, st.lists(st.tuples(job_ids, tokens), max_size=6), st.integers(1, MAX_DELAY_MS),
       times, st.lists(job_ids, max_size=6))  # fmt: skip
def test_extend_and_release(
    k: QueueKeys, items: list[tuple[str, int]], lease: int, deadline: int, lost: list[str]
) -> None:
    call = protocol.extend_call(k, items, lease)
    _check_call(call, k)
    assert call.args[1] == str(lease) and list(call.args[2::2]) == [i for i, _ in items]
    got = protocol.extend_reply([deadline, *(x.encode() for x in lost)])
    assert (got.lease_deadline_ms, got.lost) == (deadline, tuple(lost))
    call = protocol.release_call(k, items)
    _check_call(call, k)
    assert list(call.args[1::2]) == [i for i, _ in items]
    assert protocol.release_reply(len(items)) == len(items)


@given(keys_of, st.integers(1, 10**6), st.integers(0, 10**6), st.integers(0, 10**6),
       st.integers(-1, MAX_TIME_MS), times)  # fmt: skip
def test_promote_reap_and_fire_replies(
    k: QueueKeys, batch: int, moved: int, lanes: int, nxt: int, now: int
) -> None:
    for call in (protocol.promote_call(k, batch), protocol.reap_call(k, batch)):
        _check_call(call, k)
        assert call.args[1:3] == (str(batch), *(("0",) if call.script == "promote" else ()))
    witness = (str(now), str(moved), str(lanes))
    call = protocol.promote_call(k, batch, lateness=True, witness=witness)
    assert call.args[2:] == ("1", *witness)
    due = None if nxt < 0 else nxt
    got = protocol.promote_reply([moved, lanes, nxt, now, 0, 999])
    assert (got.moved, got.lanes_resumed, got.next_due_ms, got.server_now_ms, got.carrying,
            got.server_now_us, got.lateness_ms) == (
        moved, lanes, due, now, False, 999, (),
    )  # fmt: skip
    assert protocol.promote_reply([0, 0, -1, now, 1, 0]).carrying
    assert protocol.promote_reply([1, 0, nxt, now, 0, 5, 7]).lateness_ms == (7,)
    assert protocol.reap_reply([moved, now, 0]) == Reaped(moved, now)
    call = protocol.reap_holder_call(k, "a1b2c3", str(now), batch)
    _check_call(call, k)
    assert call.args[1:] == (str(batch), "a1b2c3", str(now))
    assert protocol.reap_reply([moved, now, 0, str(now).encode()]).next_from == str(now)
    assert protocol.reap_reply([moved, now, 0, b""]).next_from is None
    with pytest.raises(ValueError, match="after must be a lease deadline"):
        protocol.reap_holder_call(k, "a1b2c3", "x")
    assert protocol.reap_reply([0, now, 1]) == Reaped(0, now, carrying=True)
    call = protocol.clock_call(k, witness, batch, reap_grace_ms=lanes)
    _check_call(call, k)
    assert call.keys == (k.meta,) and call.args[1:] == (*witness, str(batch), str(lanes))
    assert protocol.clock_call(k).args[1:4] == ("", "0", "0")
    carried = protocol.clock_reply([0, -nxt, nxt, moved, 1, now])
    assert carried == ClockCarried(0, -nxt, due, moved, True, now)
    fired = protocol.fire_reply([moved, nxt, now])
    assert (fired.fired, fired.next_due_ms, fired.server_now_ms) == (moved, due, now)
    assert protocol.advance_reply(nxt) == due


# --- reads ---------------------------------------------------------------------------------------


@given(st.lists(st.integers(0, 2**40), min_size=17, max_size=17))
def test_counts_reply(values: list[int]) -> None:
    got = protocol.counts_reply(values)
    assert attrs.astuple(got) == (bool(values[0]), *values[1:])
    assert len(attrs.fields(Counts)) == 17
    assert not protocol.outdated(values)


@given(keys_of, st.integers(0, 2**40), st.integers(0, 2**40))
def test_an_upgrade_reply_by_name(k: QueueKeys, lanes: int, waiting: int) -> None:
    call = protocol.upgrade_call("count_lanes", k)
    _check_call(call, k)
    assert call.decode([lanes, waiting]) == {"lanes": lanes, "waiting": waiting}


infos = st.builds(
    JobInfo, job_ids, st.sampled_from(list(JobState)),
    st.integers(0, 100), st.binary(max_size=30), st.none() | st.text(min_size=1, max_size=20),
    st.none() | times, st.none() | names,
    progress=st.none() | st.integers(0, 100) | st.dictionaries(names, st.integers(0, 9)),
    result=st.none() | st.binary(max_size=20), finished_ms=st.none() | times,
    priority=st.integers(PRIORITY_MIN, PRIORITY_MAX),
    expires_ms=st.none() | times, debounce=st.none() | names,
)  # fmt: skip


@given(keys_of, st.lists(infos, max_size=6), st.sampled_from(sorted(protocol.STATE_SETS)),
       st.integers(0, 100), st.integers(1, 100), names)  # fmt: skip
def test_inspect_round_trip(
    k: QueueKeys, rows: list[JobInfo], state: str, offset: int, limit: int, group: str
) -> None:
    call = protocol.inspect_state_call(k, state, offset, limit)
    _check_call(call, k)
    assert call.keys == (protocol.state_set(k, state),)
    assert call.args[1:] == ("set", str(offset), str(limit))
    lane = protocol.inspect_lane_call(k, group, offset, limit)
    assert lane.keys == (k.lane(group),)
    _check_call(protocol.inspect_ids_call(k, [r.id for r in rows]), k)
    raw = [[r.id.encode(), r.state.encode(), str(r.attempts).encode(), r.payload,
            (r.last_error or "").encode(), "" if r.score_ms is None else f"{r.score_ms}",
            (r.group or "").encode(),
            None if r.progress is None else protocol.encode_progress(r.progress).encode(),
            r.result, None if r.finished_ms is None else r.finished_ms,
            str(r.priority or "").encode(),
            r.expires_ms, None if r.debounce is None else r.debounce.encode(),
            ] for r in rows]  # fmt: skip
    assert protocol.inspect_reply(raw) == rows
    assert all(type(r.state) is JobState for r in protocol.inspect_reply(raw))
    missing = [b"JOB0000000000x", b"", b"0", b"", b"", "", b"", None, None, None, b"", None, None]
    assert protocol.inspect_ids_reply([*raw, missing]) == [*rows, None]
    assert protocol.inspect_reply([missing]) == []
    with pytest.raises(ValueError, match="state must be one of"):
        protocol.inspect_state_call(k, "waiting", 0, 1)


statuses = st.builds(
    LaneStatus, names, st.integers(0, 99), st.integers(0, 99), st.none() | st.integers(1, 99),
    st.integers(1, 99), st.booleans(), st.none() | st.integers(1, MAX_TIME_MS), st.booleans(),
)  # fmt: skip


@given(keys_of, st.lists(statuses, max_size=5))
def test_lane_status_round_trip(k: QueueKeys, lanes: list[LaneStatus]) -> None:
    call = protocol.lane_status_call(k, [s.group for s in lanes])
    _check_call(call, k)
    rows = [[s.group.encode(), s.depth, s.in_flight, s.limit or 0, s.weight, int(s.paused),
             s.wait_until_ms or 0, int(s.on_ring)] for s in lanes]  # fmt: skip
    assert protocol.lane_status_reply([b"", *rows]) == LanePage(lanes, None)
    assert protocol.lane_status_reply([b"zz", *rows]) == LanePage(lanes, "zz")


lane_cursors = st.just("") | st.builds(
    "{}:{}".format, st.integers(0, 2**64 - 1), st.just("") | names
)


@given(keys_of, lane_cursors, st.integers(1, protocol.LANE_PAGE_MAX))
def test_lane_status_page_call(k: QueueKeys, after: str, count: int) -> None:
    call = protocol.lane_status_page_call(k, after, count)
    _check_call(call, k)
    assert list(call.args[1:]) == ["page", after, str(count)]
    assert not protocol.outdated([b"", [b"g", 1, 0, 0, 1, 0, 0, 1]])
    assert protocol.outdated([b"outdated"]) and protocol.outdated(["outdated"])
    with pytest.raises(protocol.Outdated, match="lane_status: the queue has an earlier layout"):
        protocol.lane_status_reply([b"outdated"])


def test_lane_status_page_count_is_bounded() -> None:
    k = queue_keys("q")
    with pytest.raises(ValueError, match="count must be <= 1000"):
        protocol.lane_status_page_call(k, "", protocol.LANE_PAGE_MAX + 1)
    with pytest.raises(ValueError, match="count must be >= 1"):
        protocol.lane_status_page_call(k, "", 0)
    for bad in ("has space", "chat-1", "12", ":3", "-1:0", "1:has space", f"{2**64}:"):
        with pytest.raises(ValueError, match="lane page cursor"):
            protocol.lane_status_page_call(k, bad, 10)


@given(keys_of, names, st.none() | st.integers(0, 99), st.none() | st.integers(1, 99), times)
def test_lane_settings(
    k: QueueKeys, group: str, limit: int | None, weight: int | None, at: int
) -> None:
    for call in (
        protocol.lane_pause_call(k, group),
        protocol.lane_pause_until_call(k, group, at),
        protocol.lane_resume_call(k, group),
        protocol.lane_config_call(k, group, limit=limit, weight=weight),
    ):
        _check_call(call, k)
        assert call.args[1] == group
    assert protocol.lane_pause_until_call(k, group, at).args[2:] == ("until", str(at))
    call = protocol.lane_config_call(k, group, limit=limit, weight=weight)
    assert call.args[2:] == (
        "" if limit is None else str(limit),
        "" if weight is None else str(weight),
    )
    assert protocol.lane_config_reply([limit or 0, weight or 1]) == (limit or None, weight or 1)
    assert protocol.lane_resume_reply(b"resumed") is True
    assert protocol.lane_resume_reply(b"not_held") is False
    with pytest.raises(ValueError):
        protocol.lane_resume_reply(1)


registrations = st.builds(
    Registration, names, times, st.integers(1, MAX_DELAY_MS), st.binary(max_size=30),
    st.none() | names, st.none() | times, priority=st.integers(PRIORITY_MIN, PRIORITY_MAX),
)  # fmt: skip


@given(keys_of, registrations, st.sampled_from(list(Registered)), times)
def test_repeat_round_trips(k: QueueKeys, reg: Registration, answer: Registered, at: int) -> None:
    call = protocol.register_call(k, reg.name, reg.every_ms, reg.template, MAX, group=reg.group,
                                  priority=reg.priority)  # fmt: skip
    _check_call(call, k)
    assert call.args[1:] == (
        reg.name, str(reg.every_ms), reg.template, "0", reg.group or "", "", "", "0", "0",
        str(reg.priority or ""),
    )  # fmt: skip
    assert protocol.register_reply([answer.value.encode(), at]) == (answer, at)
    for call in (
        protocol.unregister_call(k, reg.name),
        protocol.advance_call(k, reg.name),
        protocol.repeats_call(k, "due", 5),
        protocol.fire_call(k, [ids.generate("JOB")]),
    ):
        _check_call(call, k)
    last = "" if reg.last_fired_ms is None else str(reg.last_fired_ms)
    raw = [[reg.name.encode(), f"{reg.next_run_ms}", str(reg.every_ms).encode(), reg.template,
            (reg.group or "").encode(), last, b"", b"",
            str(reg.priority or "").encode()]]  # fmt: skip
    assert protocol.repeats_reply(raw) == [reg]
    cron_reg = attrs.evolve(reg, every_ms=None, cron="0 9 * * MON-FRI", tz="Europe/Berlin")
    raw = [[reg.name.encode(), f"{reg.next_run_ms}", b"", reg.template, (reg.group or "").encode(),
            last, b"0 9 * * MON-FRI", b"Europe/Berlin", str(reg.priority or "")]]  # fmt: skip
    assert protocol.repeats_reply(raw) == [cron_reg]
    schedule = cron.parse("0 9 * * MON-FRI", "Europe/Berlin")
    call = protocol.register_call(k, reg.name, None, reg.template, MAX, group=reg.group,
                                  cron=schedule, first_at_ms=at, replace=True)  # fmt: skip
    _check_call(call, k)
    assert call.args[1:] == (
        reg.name, "", reg.template, "0", reg.group or "", "0 9 * * MON-FRI", "Europe/Berlin",
        str(at), "1", "",
    )  # fmt: skip
    with pytest.raises(ValueError, match="exactly one of every_ms and cron"):
        protocol.register_call(k, reg.name, 1000, reg.template, MAX, cron=schedule)
    moves = [(reg.name, at - 1, at)] if at else [(reg.name, at, at + 1)]
    call = protocol.fire_call(k, [ids.generate("JOB")], moves)
    _check_call(call, k)
    assert call.args[1:5] == ("1", *(str(x) for x in moves[0]))
    with pytest.raises(ValueError, match="must come after"):
        protocol.fire_call(k, [ids.generate("JOB")], [(reg.name, at, at)])
    fired = protocol.fire_reply([2, at, at, reg.name.encode(), at, b"* * * * *", b"UTC"])
    assert fired == Fired(2, at, at, (CronDue(reg.name, at, "* * * * *", "UTC"),))
    assert protocol.unregister_reply(b"cancelled") is True
    assert protocol.unregister_reply(b"absent") is False
    with pytest.raises(ValueError):
        protocol.repeats_call(k, "some", 5)
    assert list(protocol.repeats_call(k, "all", 5, 10).args[1:]) == ["all", "5", "10"]
    with pytest.raises(ValueError, match="offset must be >= 0"):
        protocol.repeats_call(k, "all", 5, -1)


# --- streams and the audit -----------------------------------------------------------------------

stream_ids = st.builds(lambda ms, seq: f"{ms}-{seq}", st.integers(0, 2**50), st.integers(0, 99))
records = st.builds(
    AuditRecord, stream_ids, job_ids, st.sampled_from(list(AuditOutcome)), st.integers(0, 99),
    times, st.binary(max_size=40), texts, texts,
)  # fmt: skip


def _fields(r: AuditRecord) -> list[Any]:
    return [b"id", r.job_id.encode(), b"outcome", r.outcome.value.encode(), b"attempts",
            str(r.attempts).encode(), b"settled_ms", str(r.settled_ms).encode(), b"payload",
            r.payload, b"note", r.note.encode(), b"error", r.error.encode()]  # fmt: skip


@given(st.lists(records, max_size=6))
def test_audit_records_round_trip_in_every_reply_shape(recs: list[AuditRecord]) -> None:
    as_map = {r.stream_id.encode(): [list(p) for p in zip(_fields(r)[::2], _fields(r)[1::2],
                                                           strict=True)] for r in recs}  # fmt: skip
    as_list = [[r.stream_id.encode(), _fields(r)] for r in recs]
    unique = list({r.stream_id: r for r in recs}.values())
    assert protocol.audit_records(protocol.stream_entries(as_map)) == unique
    assert protocol.audit_records(protocol.stream_entries(as_list)) == recs
    group_reply = {b"emq:{q}:audit": as_map}
    assert protocol.audit_records(protocol.read_group_entries(group_reply)) == unique
    assert protocol.audit_records(protocol.autoclaim_entries([b"0-0", as_list, []])) == recs
    assert protocol.read_group_entries(None) == []


@given(keys_of, names, st.lists(stream_ids, max_size=5))
def test_audit_ack_calls(k: QueueKeys, group: str, acked: list[str]) -> None:
    (call,) = protocol.audit_ack_calls(k, group, acked)
    _check_call(call, k)
    assert call.keys == (k.audit,) and call.args == (group, *acked)
    assert protocol.audit_ack_reply([len(acked), 7]) == Acknowledged(len(acked), 7)
    with pytest.raises(TypeError, match="not one str"):
        protocol.audit_ack_calls(k, group, "1-1")
    with pytest.raises(ValueError, match="stream id"):
        protocol.audit_ack_calls(k, group, ["1-x"])


@given(keys_of, names, names, st.integers(0, MAX_DELAY_MS))
def test_audit_forget_call(k: QueueKeys, group: str, keep: str, idle: int) -> None:
    call = protocol.audit_forget_call(k, group, idle, keep)
    _check_call(call, k)
    assert call.args == (k.prefix, group, str(idle), keep)
    assert protocol.audit_forget_call(k, group, idle).args[-1] == ""  # nobody kept
    assert protocol.audit_forget_reply([b"host-1", "host-2"]) == ["host-1", "host-2"]
    assert protocol.audit_forget_reply([]) == protocol.audit_forget_reply(None) == []
    with pytest.raises(ValueError, match="idle_ms must be >= 0"):
        protocol.audit_forget_call(k, group, -1)
    with pytest.raises(ValueError, match="consumer must not"):
        protocol.audit_forget_call(k, group, idle, "")


def test_audit_ack_goes_in_chunks() -> None:
    k = queue_keys("q")
    many = [f"{i}-0" for i in range(protocol.AUDIT_ACK_MAX + 1)]
    calls = protocol.audit_ack_calls(k, "g", many)
    assert [len(c.args) for c in calls] == [1 + protocol.AUDIT_ACK_MAX, 2]


@given(names, names, st.integers(1, 10**6), st.booleans(), st.integers(0, MAX_DELAY_MS))
def test_stream_commands(group: str, consumer: str, count: int, pending: bool, idle: int) -> None:
    key = queue_keys("q").events
    assert protocol.read_group_command(key, group, consumer, count, pending=pending) == [
        "XREADGROUP", "GROUP", group, consumer, "COUNT", str(count), "STREAMS", key,
        "0" if pending else ">",
    ]  # fmt: skip
    assert protocol.autoclaim_command(key, group, consumer, idle, count)[4] == str(idle)
    assert protocol.create_group_command(key, group, "$")[-2:] == ["$", "MKSTREAM"]
    assert protocol.stream_ack_command(key, group, []) == []
    assert protocol.range_command(key, "-", count)[2] == "-"
    assert protocol.range_command(key, "5-1", count)[2] == "(5-1"


@pytest.mark.parametrize("holder", ["", "has space", "{tag}", "x" * 129])
def test_a_holder_is_named_as_a_queue_is(holder: str) -> None:
    k = queue_keys("q")
    with pytest.raises(ValueError, match="holder"):
        protocol.reap_holder_call(k, holder)
    if holder:
        with pytest.raises(ValueError, match="holder"):
            protocol.claim_call(k, 1, 1000, holder)
