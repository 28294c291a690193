"""The calls of a job's life (pure): enqueue, lane_enqueue, schedule, promote, claim, reap, clock,
ack, retry, defer, extend, progress, release, replay, retention, keep_results, discard, cancel,
counts, inspect, result; and the read of cancel marks (``cancel_marks_command``)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from functools import partial
from typing import Any

from echomq_trio._checks import (
    check_group,
    check_holder,
    check_int,
    check_job_id,
    check_ms,
    check_payload,
    check_priority,
    check_when,
)
from echomq_trio._replies import as_bytes, as_text
from echomq_trio.keys import QueueKeys
from echomq_trio.protocol._base import (
    _OUTCOMES,
    DEFAULT_KEY_TTL_MS,
    ENQUEUE_CHUNK,
    REPLY_FIELDS,
    Arg,
    Call,
    Payload,
    When,
    _call,
    _guard,
    _named,
    _nothing,
    _outcome,
    _outcomes,
    _pairs,
    _refuse_outdated,
    _seq,
    _time,
    _tokens,
    outcome_reply,
)
from echomq_trio.results import (
    Admitted,
    Cancelled,
    ClockCarried,
    Counts,
    Extended,
    Job,
    JobInfo,
    Outcome,
    Promoted,
    Reaped,
    ResultState,
    Retention,
)
from echomq_trio.sequence import Seq
from echomq_trio.states import JobState

# --- enqueue, lane_enqueue, schedule -------------------------------------------------------------


def enqueue_calls(
    k: QueueKeys,
    items: Iterable[tuple[str, Payload]],
    max_bytes: int,
    *,
    key: str | None = None,
    key_ttl_ms: int = DEFAULT_KEY_TTL_MS,
    timeout_ms: int | None = None,
    priority: int = 0,
    expires: str = "",
) -> list[Call[list[Admitted]]]:
    """``enqueue``: admit jobs to the flat pending set, one call per ``ENQUEUE_CHUNK`` jobs (none
    for no jobs). An idempotency ``key`` guards exactly one job; ``timeout_ms`` is each job's
    handler deadline per attempt (``None``: none of its own); ``priority`` each job's priority
    (``priority_arg``); ``expires`` each job's expiry (``expiry_arg``; ``''``: none)."""
    guard = _guard(key, key_ttl_ms)
    timeout = timeout_arg(timeout_ms)
    prio = priority_arg(priority)
    flat = _pairs(items, max_bytes)
    if key is not None and len(flat) != 2:
        raise ValueError("an idempotency key guards exactly one job")
    return _enqueue_chunks(k, [*guard, timeout, prio, expires], flat)


def enqueue_checked_calls(
    k: QueueKeys,
    pairs: Sequence[tuple[str, bytes]],
    timeout_ms: int | None = None,
    priority: int = 0,
    expires: str = "",
) -> list[Call[list[Admitted]]]:
    """``enqueue_calls`` for pairs already checked by ``checked_pairs`` (no key)."""
    flat: list[Arg] = [a for pair in pairs for a in pair]
    return _enqueue_chunks(
        k, ["", "", timeout_arg(timeout_ms), priority_arg(priority), expires], flat
    )


def enqueue_one_call(k: QueueKeys, pair: tuple[str, bytes]) -> Call[Admitted]:
    """``enqueue_checked_calls`` for one checked pair (no timeout): its one call, answered with
    its one ``Admitted`` (the path of every sequential ``jobs.enqueue``, so built without the
    lists and slices a batch needs)."""
    job_id, payload = pair
    return Call(
        "enqueue", (k.pending,), (k.prefix, "", "", "", "", "", job_id, payload),
        decode=partial(_admitted_one, job_id),
    )  # fmt: skip


def _admitted_one(job_id: str, raw: Sequence[object]) -> Admitted:
    if raw.__class__ is list and len(raw) == 1:
        try:
            return Admitted(job_id, _OUTCOMES[raw[0]])
        except (KeyError, TypeError):
            pass
    (admitted,) = admitted_reply(raw, [job_id])  # raises ValueError naming what is wrong
    return admitted


def timeout_arg(timeout_ms: int | None) -> str:
    """A job's ``timeout_ms`` as its scripts take it: ms, at least 1; ``''`` for ``None``."""
    return "" if timeout_ms is None else str(check_ms("timeout_ms", timeout_ms, 1))


def priority_arg(priority: int) -> str:
    """A job's ``priority`` as its scripts take it: an int from ``PRIORITY_MIN`` to
    ``PRIORITY_MAX`` (``_checks``); ``''`` for 0, the default, which its row does not keep."""
    return str(priority) if check_priority(priority) else ""


def _enqueue_chunks(k: QueueKeys, guard: list[Arg], flat: list[Arg]) -> list[Call[list[Admitted]]]:
    step = 2 * ENQUEUE_CHUNK
    if 0 < len(flat) <= step:  # one call (every single enqueue): no slices to copy
        chunks = [flat]
    else:
        chunks = [flat[start : start + step] for start in range(0, len(flat), step)]
    return [
        Call(
            "enqueue",
            (k.pending,),
            (k.prefix, *guard, *chunk),
            decode=partial(admitted_reply, job_ids=[str(i) for i in chunk[::2]]),
        )
        for chunk in chunks
    ]


def lane_enqueue_call(
    k: QueueKeys,
    group: str,
    items: Iterable[tuple[str, Payload]],
    max_bytes: int,
    *,
    limit: int | None = None,
    key: str | None = None,
    key_ttl_ms: int = DEFAULT_KEY_TTL_MS,
    seq: Seq | None = None,
    timeout_ms: int | None = None,
    priority: int = 0,
    expires: str = "",
) -> Call[list[Admitted]]:
    """``lane_enqueue``: admit jobs to ``group``'s lane, setting its ``limit`` when given. An
    idempotency ``key`` or a ``seq`` (``sequence.Seq``) guards exactly one job; ``timeout_ms``,
    ``priority`` and ``expires`` as for ``enqueue_calls``."""
    guard = _guard(key, key_ttl_ms)
    timeout = timeout_arg(timeout_ms)
    prio = priority_arg(priority)
    lane = k.lane(group)
    flat = _pairs(items, max_bytes)
    if key is not None and len(flat) != 2:
        raise ValueError("an idempotency key guards exactly one job")
    if seq is not None and len(flat) != 2:
        raise ValueError("a seq guards exactly one job")
    lim = "" if limit is None else str(check_int("limit", limit, 1))
    decode = partial(admitted_reply, job_ids=[str(job_id) for job_id in flat[::2]])
    args = [k.prefix, group, lim, *guard, *_seq(seq), timeout, prio, expires, *flat]
    return _call("lane_enqueue", lane, args, decode)


def admitted_reply(raw: Iterable[object], job_ids: Sequence[str]) -> list[Admitted]:
    """``enqueue``/``lane_enqueue``: ``ENQUEUED`` or ``DUPLICATE`` per job of ``job_ids`` (the
    call's, in order)."""
    return [Admitted(i, o) for i, o in zip(job_ids, _outcomes(raw), strict=True)]


def schedule_call(
    k: QueueKeys,
    items: Sequence[tuple[str, Payload, When]],
    max_bytes: int,
    *,
    relative: bool,
    group: str | None = None,
    timeout_ms: int | None = None,
    priority: int = 0,
    expires: str = "",
) -> Call[list[Admitted]]:
    """``schedule``: ``(job id, payload, time)`` each, the time a run-at (Unix ms, or an aware
    datetime; checked as ``run_at_ms``) or with ``relative`` a delay from the server's now
    (``delay_ms``, or a timedelta); a float or a datetime is rounded up to the next ms
    (``checks.check_when``). ``timeout_ms``, ``priority`` and ``expires`` as for
    ``enqueue_calls``."""
    timeout = timeout_arg(timeout_ms)
    prio = priority_arg(priority)
    flat: list[Arg] = []
    for job_id, payload, when in items:
        name = "delay_ms" if relative else "run_at_ms"
        ms = check_when(name, when, absolute=not relative)
        flat += [check_job_id(job_id), check_payload(payload, max_bytes), str(ms)]
    lane = "" if group is None else check_group(group)
    mode = "in" if relative else "at"
    decode = partial(schedule_reply, job_ids=[job_id for job_id, _, _ in items])
    args = [k.prefix, mode, lane, timeout, prio, expires, *flat]
    return _call("schedule", k.schedule, args, decode)


def schedule_reply(raw: Iterable[Sequence[Any]], job_ids: Sequence[str]) -> list[Admitted]:
    """``schedule``: ``{'scheduled', run-at}`` or ``{'duplicate'}`` per job of ``job_ids`` (the
    call's, in order)."""
    out = []
    for job_id, answer in zip(job_ids, raw, strict=True):
        r = _named("schedule/job", answer)
        outcome = _outcome(r["outcome"])
        at = int(r["at"]) if outcome is Outcome.SCHEDULED else None
        out.append(Admitted(job_id, outcome, at))
    return out


# --- promote, claim, reap ------------------------------------------------------------------------


def promote_call(
    k: QueueKeys,
    batch: int,
    *,
    lateness: bool = False,
    witness: tuple[str, str, str] | None = None,
) -> Call[Promoted]:
    """``lateness``: the reply also carries how late each moved job was. ``witness``: the
    caller's evidence of the server clock (``clock.Witness.args``), so a step is noticed."""
    args = [k.prefix, str(check_int("batch", batch, 1)), "1" if lateness else "0"]
    return _call("promote", k.schedule, [*args, *witness] if witness else args, promote_reply)


def promote_reply(raw: Sequence[Any]) -> Promoted:
    r = _named("promote", raw)
    return Promoted(int(r["moved"]), int(r["lanes_resumed"]), _time(r["next_due"]),
                    int(r["now"]), tuple(int(ms) for ms in r["lateness"]),
                    carrying=int(r["carrying"]) == 1, server_now_us=int(r["now_us"]))  # fmt: skip


def claim_call(k: QueueKeys, batch: int, lease_ms: int, holder: str = "") -> Call[list[Job]]:
    """``holder``: the claiming bus's id, kept in each claimed job's row (``reap_holder_call``)."""
    args = [k.prefix, str(check_int("batch", batch, 1)), str(check_ms("lease_ms", lease_ms, 1))]
    decode = partial(claim_reply, queue=k.name)
    return _call("claim", k.pending, [*args, check_holder(holder)] if holder else args, decode)


# The claim is the hot path (one decode per job): its fields are found by name once, here, not
# per job (``REPLY_FIELDS``, held against the script's header by tests/echomq_trio/test_scripts).
_DEADLINE = REPLY_FIELDS["claim"].index("lease_deadline")
_JOBS_FROM = REPLY_FIELDS["claim"].index("jobs...")
_JOB = REPLY_FIELDS["claim/job"]
_ID, _PAYLOAD, _ATTEMPTS, _TOKEN, _GROUP, _OPTIONS = (
    _JOB.index(name) for name in ("id", "payload", "attempts", "token", "group", "options")
)


def claim_reply(raw: Sequence[Any], queue: str) -> list[Job]:
    """``{lease deadline, then per job: id, payload, attempts, token, group or '', options}``:
    options ``''`` (none), the timeout ms (a timeout alone) or ``{timeout ms or '', priority}``
    (a priority): a job without a priority costs what it did before priorities."""
    if len(raw) < _JOBS_FROM:
        raise ValueError(f"claim answered {len(raw)} fields, expected a deadline and jobs")
    if (len(raw) - _JOBS_FROM) % len(_JOB):
        flat = len(raw) - _JOBS_FROM
        raise ValueError(f"claim/job answered {flat} fields, not items of {len(_JOB)}")
    deadline = int(raw[_DEADLINE])
    jobs = []
    for i in range(_JOBS_FROM, len(raw), len(_JOB)):
        payload = raw[i + _PAYLOAD]
        if not isinstance(payload, bytes):
            payload = str(payload).encode()
        group = raw[i + _GROUP]
        timeout = raw[i + _OPTIONS]
        priority = 0
        if isinstance(timeout, list):
            timeout, priority = timeout[0], int(timeout[1])
        jobs.append(
            Job(queue, as_text(raw[i + _ID]), payload, int(raw[i + _ATTEMPTS]),
                int(raw[i + _TOKEN]), deadline, as_text(group) if group else None,
                int(timeout) if timeout else None, priority)
        )  # fmt: skip
    return jobs


def reap_call(k: QueueKeys, batch: int) -> Call[Reaped]:
    return _call("reap", k.active, [k.prefix, str(check_int("batch", batch, 1))], reap_reply)


def reap_reply(raw: Sequence[Any]) -> Reaped:
    r = _named("reap", raw)
    after = "" if r["next_from"] is None else as_text(r["next_from"])
    return Reaped(int(r["reaped"]), int(r["now"]), carrying=int(r["carrying"]) == 1,
                  next_from=after or None)  # fmt: skip


def reap_holder_call(k: QueueKeys, holder: str, after: str = "", batch: int = 1000) -> Call[Reaped]:
    """``reap`` of every job ``holder`` leased, whatever its deadline: a page of ``batch`` jobs of
    ``active`` past the lease deadline ``after`` ('' for the start; ``Reaped.next_from`` for the
    next page, ``None`` at the end)."""
    if after and not _is_number(after):
        raise ValueError(f"after must be a lease deadline from a reap's answer, got {after!r}")
    args = [k.prefix, str(check_int("batch", batch, 1)), check_holder(holder), after]
    return _call("reap", k.active, args, reap_reply)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def clock_call(
    k: QueueKeys,
    witness: tuple[str, str, str] | None = None,
    batch: int = 1000,
    *,
    reap_grace_ms: int = 30_000,
) -> Call[ClockCarried]:
    """``clock``: record a step the ``witness`` shows (``clock.Witness.args``; ``None``: none)
    and carry up to ``batch`` of the queue's waits across the last recorded step; no lease is
    reaped for ``reap_grace_ms`` after a step is recorded."""
    seen, elapsed, spread = witness or ("", "0", "0")
    grace = str(check_ms("reap_grace_ms", reap_grace_ms))
    args = [k.prefix, seen, elapsed, spread, str(check_int("batch", batch, 1)), grace]
    return _call("clock", k.meta, args, clock_reply)


def clock_reply(raw: Sequence[Any]) -> ClockCarried:
    r = _named("clock", raw)
    return ClockCarried(int(r["recorded"]), int(r["step"]), _time(r["step_at"]),
                        int(r["carried"]), int(r["more"]) == 1, int(r["now"]))  # fmt: skip


# --- ack, retry, defer, extend, release, replay --------------------------------------------------


def ack_call(
    k: QueueKeys, items: Sequence[tuple[str, int] | tuple[str, int, str]]
) -> Call[list[Outcome]]:
    """``ack``: ``(id, token)`` or ``(id, token, note)`` each."""
    flat: list[Arg] = [k.prefix]
    for item in items:
        job_id, token = item[0], item[1]
        note = item[2] if len(item) > 2 else ""
        flat += [check_job_id(job_id), str(check_int("token", token, 0)), str(note)]
    return _call("ack", k.active, flat, ack_reply)


def ack_results_call(
    k: QueueKeys, items: Sequence[tuple[str, int, str, bytes]]
) -> Call[list[Outcome]]:
    """``ack`` with results: ``(id, token, note, result)`` each (the result kept with the
    finished job where the queue keeps results)."""
    flat: list[Arg] = [k.prefix, "results"]
    for job_id, token, note, result in items:
        if not isinstance(result, bytes):
            raise TypeError(f"result must be bytes, got {type(result).__name__}")
        flat += [check_job_id(job_id), str(check_int("token", token, 0)), str(note), result]
    return _call("ack", k.active, flat, ack_reply)


def ack_reply(raw: Iterable[object]) -> list[Outcome]:
    """``ACKED``, ``STALE`` or ``GONE`` per job, in order."""
    return _outcomes(raw)


def retry_call(
    k: QueueKeys,
    job_id: str,
    token: int,
    delay_ms: int,
    max_attempts: int,
    error: str = "",
    *,
    buried: bool = False,
) -> Call[Outcome]:
    args = [
        k.prefix,
        check_job_id(job_id),
        str(check_int("token", token, 0)),
        str(check_ms("delay_ms", delay_ms)),
        str(check_int("max_attempts", max_attempts, 1)),
        str(error),
        "1" if buried else "0",
    ]
    return _call("retry", k.active, args, outcome_reply)


def defer_call(
    k: QueueKeys, job_id: str, token: int, delay_ms: int, reason: str = ""
) -> Call[Outcome]:
    args = [
        k.prefix,
        check_job_id(job_id),
        str(check_int("token", token, 0)),
        str(check_ms("delay_ms", delay_ms)),
        str(reason),
    ]
    return _call("defer", k.active, args, outcome_reply)


def extend_call(k: QueueKeys, items: Sequence[tuple[str, int]], lease_ms: int) -> Call[Extended]:
    lease = str(check_ms("lease_ms", lease_ms, 1))
    return _call("extend", k.active, [k.prefix, lease, *_tokens(items)], extend_reply)


def extend_reply(raw: Sequence[Any]) -> Extended:
    r = _named("extend", raw)
    return Extended(int(r["deadline"]), tuple(as_text(x) for x in r["lost"]))


MAX_PROGRESS_BYTES = 4096  # a job's progress, as JSON: a number or a small value, not a payload


def encode_progress(value: object) -> str:
    """A handler's progress as the JSON text kept in the job's row: a number (not NaN or
    infinite) or a JSON-able value of at most ``MAX_PROGRESS_BYTES``; ``TypeError`` or
    ``ValueError`` (one line) for anything else."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        try:
            text = json.dumps(value, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"progress must be a number or a JSON-able value: {exc}") from None
        if len(text.encode()) > MAX_PROGRESS_BYTES:
            raise ValueError(
                f"progress must be at most {MAX_PROGRESS_BYTES} bytes as JSON, got "
                f"{len(text.encode())}"
            )
        return text
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        raise ValueError(f"progress must be a finite number, got {value!r}")
    return json.dumps(value)


def decode_progress(text: object) -> object:
    """The value of a job's progress as kept (JSON text), ``None`` for none."""
    if text is None or text is False:
        return None
    return json.loads(as_text(text))


def progress_call(k: QueueKeys, items: Sequence[tuple[str, int, str]]) -> Call[list[Outcome]]:
    """``progress``: ``(id, token, progress as JSON text)`` each (``encode_progress``)."""
    flat: list[Arg] = [k.prefix]
    for job_id, token, text in items:
        flat += [check_job_id(job_id), str(check_int("token", token, 0)), text]
    return _call("progress", k.active, flat, ack_reply)


def release_call(k: QueueKeys, items: Sequence[tuple[str, int]]) -> Call[int]:
    return _call("release", k.active, [k.prefix, *_tokens(items)], release_reply)


def release_reply(raw: Any) -> int:
    return int(raw)


def replay_call(k: QueueKeys, job_id: str) -> Call[Outcome]:
    return _call("replay", k.dead, [k.prefix, check_job_id(job_id)], outcome_reply)


def retention_call(
    k: QueueKeys,
    *,
    dead_max: int | None = None,
    dead_max_age_ms: int | None = None,
    events: bool = True,
    events_max_len: int | None = None,
    read_only: bool = False,
) -> Call[Retention]:
    """``retention``: set the queue's bounds (``None``: no bound; ``events_max_len`` ``None``:
    the bus's default), or with ``read_only`` only read them."""
    if read_only:
        return _call("retention", k.meta, [k.prefix, "0"], retention_reply)
    args = [
        "" if dead_max is None else str(check_int("dead_max", dead_max, 0)),
        "" if dead_max_age_ms is None else str(check_ms("dead_max_age_ms", dead_max_age_ms, 1)),
        "1" if _check_bool("events", events) else "0",
        "" if events_max_len is None else str(check_int("events_max_len", events_max_len, 1)),
    ]
    return _call("retention", k.meta, [k.prefix, "1", *args], retention_reply)


def _check_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def retention_reply(raw: Sequence[Any]) -> Retention:
    """``retention``: the settings in effect."""
    r = {name: as_text(v) for name, v in _named("retention", raw).items()}
    dead_max, dead_age, events, max_len = (r["dead_max"], r["dead_max_age_ms"], r["events"],
                                           r["events_max_len"])  # fmt: skip
    return Retention(
        int(dead_max) if dead_max else None,
        int(dead_age) if dead_age else None,
        events != "0",
        int(max_len),
    )


def keep_results_call(k: QueueKeys, ttl_ms: int | None = None) -> Call[int]:
    """``keep_results``: keep finished jobs with their results for ``ttl_ms`` (0: keep none), or
    with ``None`` only read the TTL in effect."""
    if ttl_ms is None:
        return _call("keep_results", k.meta, [k.prefix, "0", ""], int)
    return _call("keep_results", k.meta, [k.prefix, "1", str(check_ms("ttl_ms", ttl_ms))], int)


def result_call(k: QueueKeys, job_id: str) -> Call[ResultState]:
    """``result``: what ``jobs.result`` needs of a job (its state, result, error)."""
    return _call("result", k.meta, [k.prefix, check_job_id(job_id)], result_reply)


def result_reply(raw: Sequence[Any]) -> ResultState:
    r = _named("result", raw)
    result = r["result"]
    return ResultState(as_text(r["state"]), int(r["keeps_ms"]), as_text(r["error"]) or None,
                       None if result is None else as_bytes(result))  # fmt: skip


def discard_call(k: QueueKeys, job_id: str) -> Call[Outcome]:
    return _call("discard", k.dead, [k.prefix, check_job_id(job_id)], outcome_reply)


def cancel_call(k: QueueKeys, job_id: str, reason: str = "", by: str = "") -> Call[Cancelled]:
    """``cancel``: ``reason`` and ``by`` (who) are kept with the job, its event and its audit
    record (text, at most ``CANCEL_TEXT_MAX`` characters each)."""
    args = [k.prefix, check_job_id(job_id), _text("reason", reason), _text("by", by)]
    return _call("cancel", k.cancelled, args, cancel_reply)


CANCEL_TEXT_MAX = 1000  # the longest reason or name a cancel keeps


def _text(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    if len(value) > CANCEL_TEXT_MAX:
        raise ValueError(f"{name} must be at most {CANCEL_TEXT_MAX} characters, got {len(value)}")
    return value


def cancel_reply(raw: object) -> Cancelled:
    """``CANCELLED``, ``ALREADY_DONE`` or ``NOT_FOUND``."""
    try:
        return Cancelled(as_text(raw) if isinstance(raw, bytes | str) else repr(raw))
    except ValueError:
        raise ValueError(f"{raw!r} is not an answer of cancel") from None


def cancel_mark(job_id: str, token: int) -> str:
    """The member of ``cancel_marks`` that tells the holder of ``job_id`` under lease ``token``
    that the job was cancelled (``scripts/cancel.lua``)."""
    return f"{job_id}:{token}"


def cancel_marks_command(k: QueueKeys, held: Sequence[tuple[str, int]]) -> list[str]:
    """``ZMSCORE`` of the marks of ``held`` jobs (``(id, token)`` each, at least one): one round
    trip for all of them; ``cancelled_among`` reads its answer."""
    if not held:
        raise ValueError("cancel_marks_command needs at least one job")
    return ["ZMSCORE", k.cancel_marks, *(cancel_mark(i, t) for i, t in held)]


def cancelled_among(held: Sequence[tuple[str, int]], raw: Sequence[object]) -> list[int]:
    """The indexes into ``held`` of the jobs whose mark ``cancel_marks_command`` found."""
    if len(raw) != len(held):
        raise ValueError(f"ZMSCORE answered {len(raw)} scores for {len(held)} marks")
    return [i for i, score in enumerate(raw) if score is not None]


def audit_enable_call(k: QueueKeys, on: bool) -> Call[None]:
    return _call("audit_enable", k.meta, [k.prefix, "1" if on else "0"], _nothing)


# --- counts, inspect -----------------------------------------------------------------------------


def counts_call(k: QueueKeys) -> Call[Counts]:
    return _call("counts", k.pending, [k.prefix], counts_reply)


def counts_reply(raw: Sequence[Any]) -> Counts:
    """The counters; ``Outdated`` for a queue of an earlier layout."""
    _refuse_outdated("counts", raw)
    r: dict[str, Any] = {name: int(v) for name, v in _named("counts", raw).items()}
    return Counts(**(r | {"exists": bool(r["exists"])}))


def upgrade_call(script: str, k: QueueKeys) -> Call[dict[str, int]]:
    """An upgrade of a queue's layout (``_layouts.UPGRADES``): what it did, by field name
    (every field 0 when the queue had that layout already)."""
    return _call(script, k.meta, [k.prefix], partial(_upgrade_reply, script))


def _upgrade_reply(script: str, raw: Sequence[Any]) -> dict[str, int]:
    return {name: int(v) for name, v in _named(script, raw).items()}


# Where a job in each state waits, by ``SCHEMA`` name (a pending lane job waits in its lane
# instead; a completed job in no set, so it is not listed): ``states.JobState.waits_in``, the
# table scripts/README.md is written from.
STATE_SETS = {str(s): s.waits_in for s in JobState if s.waits_in}


def state_set(k: QueueKeys, state: str) -> str:
    """The key of the sorted set that holds the jobs in ``state`` (``pending``: the flat set)."""
    if state not in STATE_SETS:
        raise ValueError(f"state must be one of {sorted(STATE_SETS)}, got {state!r}")
    key: str = getattr(k, STATE_SETS[state])
    return key


def _inspect_set(key: str, k: QueueKeys, offset: int, limit: int) -> Call[list[JobInfo]]:
    off = str(check_int("offset", offset, 0))
    args = [k.prefix, "set", off, str(check_int("limit", limit, 1))]
    return _call("inspect", key, args, inspect_reply)


def inspect_state_call(k: QueueKeys, state: str, offset: int, limit: int) -> Call[list[JobInfo]]:
    """``inspect`` the jobs in one state's set (``pending``: the flat set)."""
    return _inspect_set(state_set(k, state), k, offset, limit)


def inspect_lane_call(k: QueueKeys, group: str, offset: int, limit: int) -> Call[list[JobInfo]]:
    """``inspect`` the jobs waiting in a lane."""
    return _inspect_set(k.lane(group), k, offset, limit)


def inspect_ids_call(k: QueueKeys, job_ids: Sequence[str]) -> Call[list[JobInfo | None]]:
    args = [k.prefix, "ids", *(check_job_id(i) for i in job_ids)]
    return _call("inspect", k.pending, args, inspect_ids_reply)


def inspect_reply(raw: Iterable[Sequence[object]]) -> list[JobInfo]:
    """Per job ``{id, state, attempts, payload, last_error, score, group, ...}``, of rows that exist
    (a set's; ``inspect_ids_reply`` tells a missing row)."""
    return [info for info in inspect_ids_reply(raw) if info is not None]


def inspect_ids_reply(raw: Iterable[Sequence[object]]) -> list[JobInfo | None]:
    """Per job named ``{id, state, attempts, payload, last_error, score, group, progress,
    result, finished, priority, expires, debounce}``: its row, or ``None`` for a missing row
    (state ``''``)."""
    out: list[JobInfo | None] = []
    for row in raw:
        r = _named("inspect/job", row)
        sc = as_text(r["score"])
        if not as_text(r["state"]):
            out.append(None)
            continue
        out.append(
            JobInfo(
                id=as_text(r["id"]),
                state=JobState(as_text(r["state"])),
                attempts=int(as_text(r["attempts"])),
                payload=as_bytes(r["payload"]),
                last_error=as_text(r["last_error"]) or None,
                score_ms=int(float(sc)) if sc else None,
                group=as_text(r["group"]) or None,
                progress=decode_progress(r["progress"]),
                result=None if r["result"] is None else as_bytes(r["result"]),
                finished_ms=None if r["finished"] is None else int(r["finished"]),
                priority=int(as_text(r["priority"]) or 0),
                expires_ms=None if r["expires"] is None else int(r["expires"]),
                debounce=None if r["debounce"] is None else as_text(r["debounce"]),
            )
        )
    return out
