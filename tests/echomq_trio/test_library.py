"""The bus's scripts as one function library (``echomq_trio._library``): its functions, their
flags, the helpers' per-run state set afresh on every call (pure), and, against real servers,
the library's functions answering as the scripts do, a queue's settings read afresh by each call."""

from __future__ import annotations

import pytest

from echomq_trio import Bus, jobs, lua
from echomq_trio._library import build_library, is_read_only, library
from echomq_trio.results import Outcome


def test_every_script_of_the_bus_is_a_function_of_the_library() -> None:
    assert set(library().functions) == set(lua._BUS_SCRIPTS)
    assert library().source.startswith(f"#!lua name={library().name}\n")
    for name, function in library().functions.items():
        assert function == f"{library().name}_{name}"
        assert f"function_name = '{function}'" in library().source


def test_the_library_s_name_changes_with_any_script() -> None:
    changed = dict(lua._BUS_SCRIPTS, counts=lua._BUS_SCRIPTS["counts"] + "\n-- changed\n")
    assert build_library(dict(lua._BUS_SCRIPTS)).name == library().name
    assert build_library(changed).name != library().name


def test_reads_are_told_from_writes() -> None:
    assert is_read_only("return redis.call('HGET', KEYS[1], 'a')")
    assert is_read_only("local c = 'ZSCORE'\nreturn redis.call(c, KEYS[1], 'm')")
    assert not is_read_only("return redis.call('HSET', KEYS[1], 'a', 1)")
    assert not is_read_only("local c = 'DEL'\nreturn redis.call(c, KEYS[1])")
    assert not is_read_only("return redis.call(ARGV[1], KEYS[1])")  # the caller's command
    assert not is_read_only("return redis.call('NEWCOMMAND', KEYS[1])")  # unknown: a write
    assert is_read_only("-- redis.call('DEL', KEYS[1]) in a comment\nreturn 1")
    reads = {n for n in lua._BUS_SCRIPTS if is_read_only(lua.script_source(n))}
    assert {"counts", "inspect", "lane_status", "result"} <= reads
    assert not reads & {"enqueue", "claim", "ack", "retry", "promote", "lane_enqueue"}


def test_the_helpers_per_run_state_is_set_afresh_by_every_function() -> None:
    for function in library().functions.values():
        start = library().source.index(f"function_name = '{function}'")
        body = library().source[start : library().source.index("\nend}", start)]
        assert "\nkept, kept_qp, kept_of = nil, nil, nil\nlane_keys_seen = {}\n" in body
    assert "\nWAKE_KEEP = " not in library().source  # a constant is made once


@pytest.mark.server
async def test_a_queue_s_settings_changed_between_calls_are_read_afresh(
    bus: Bus, queue: str
) -> None:
    """``ack`` reads whether the queue keeps results once per run (``kept``): a library call
    that kept the last call's reading would keep a job the queue no longer keeps results of."""
    await jobs.keep_results(bus, queue, 60_000)
    for _ in range(2):
        await jobs.enqueue(bus, queue, b"x")
    first, second = await jobs.claim(bus, queue, 2)
    assert await jobs.ack(bus, queue, first.id, first.token) is Outcome.ACKED
    kept = await jobs.get_job(bus, queue, first.id)
    assert kept is not None and kept.state == "completed"
    await jobs.keep_results(bus, queue, 0)
    assert await jobs.ack(bus, queue, second.id, second.token) is Outcome.ACKED
    assert await jobs.get_job(bus, queue, second.id) is None
