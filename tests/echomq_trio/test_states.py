"""The state machine (``echomq_trio.states``): the table's properties, the README and the scripts'
headers written from it, and a stateful test that drives the real scripts on a real server
against the table: after every step each job's row, its lane's wait and the queue's counts are
what the table says."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, TypeVar

import attrs
import pytest
import trio
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from echomq_trio import Bus, jobs, lanes, protocol, states
from echomq_trio.results import Outcome
from echomq_trio.states import EDGES, JobState, Place, next_place
from tests.conftest import wait_for
from tools import states as tool

T = TypeVar("T")


async def _past(bus: Bus, ms: int) -> bool:
    return await bus.wire.server_time_ms() > ms


# --- the table -----------------------------------------------------------------------------------


def _reachable(start: set[Any]) -> set[Any]:
    seen, todo = set(start), list(start)
    while todo:
        here = todo.pop()
        for e in EDGES:
            if e.source == here and e.target not in seen:
                seen.add(e.target)
                todo.append(e.target)
    return seen


def test_every_place_is_reachable_from_pending_or_scheduled() -> None:
    assert _reachable({Place.PENDING, Place.SCHEDULED}) == set(Place)
    # and every lane state and recurring schedule state from where each begins
    assert _reachable({states.LaneState.IDLE}) == set(states.LaneState)
    assert _reachable({states.RepeatState.NONE}) == set(states.RepeatState)


def test_a_job_s_life_ends_only_in_none_and_none_is_left_only_by_admitting() -> None:
    """No row is the one terminal place: every other place has an exit to another place, and
    the only moves out of no row are the scripts that admit a job."""
    for place in Place:
        exits = {e.target for e in EDGES if e.source is place and e.target is not place}
        assert exits, f"{place.value} has no exit"
    admit = {e.script for e in EDGES if e.source is Place.NONE}
    assert admit == {"enqueue", "lane_enqueue", "schedule", "fire"}
    assert all(
        states.SCRIPTS[s].answers in ((), ("enqueued", "duplicate"), ("scheduled", "duplicate"))
        for s in admit
    )


def test_each_move_has_one_target_and_every_moving_script_moves() -> None:
    keys = [(e.source, e.script, e.case) for e in EDGES]
    assert len(keys) == len(set(keys)), "a (place, script, case) with two targets"
    for name, script in states.SCRIPTS.items():
        assert bool(states.edges_of(name)) == (not script.moves), name
    for e in EDGES:
        assert type(e.source) is type(e.target) or e.script == "clock", e


def test_next_place_follows_the_table_and_refuses_what_it_lacks() -> None:
    assert next_place(Place.ACTIVE, "retry", "attempts spent, or buried") is Place.DEAD
    assert next_place(Place.DEAD, "replay", "lane") is Place.LANE
    with pytest.raises(ValueError, match="claim does not move a job from dead"):
        next_place(Place.DEAD, "claim")
    with pytest.raises(ValueError, match="no bus script 'nope'"):
        next_place(Place.PENDING, "nope")


def test_stored_states_are_the_server_s_words_and_where_they_wait() -> None:
    assert [str(s) for s in JobState] == ["pending", "scheduled", "active", "dead"]
    assert {p.state for p in Place} == {None, *JobState}
    assert Place.LANE_WAITING.state is JobState.PENDING
    assert protocol.STATE_SETS == {
        "pending": "pending", "scheduled": "schedule", "active": "active", "dead": "dead",
    }  # fmt: skip


def test_the_readme_and_the_headers_are_what_the_table_writes() -> None:
    stale = [p.name for p, text in tool.generated().items() if p.read_text() != text]
    assert not stale, f"run python -m tools.states: {stale} differ from echomq_trio.states"
    readme = tool.README.read_text()
    assert "\n".join(states.mermaid()) in readme and "stateDiagram-v2" in readme
    assert tool.main(["--check"]) == 0


def test_the_tool_finds_a_readme_or_header_that_differs() -> None:
    text = tool.README.read_text()
    changed = text.replace("| `claim` | `pending`", "| `claim` | `dead`")
    assert tool.readme_text(changed) == text
    with pytest.raises(ValueError, match="needs one"):
        tool.readme_text(text.replace("<!-- end states: diagram -->", ""))
    header = "-- ack: x\n-- transition: dead -> active\nreturn 1\n"
    assert tool.header_text("ack", header) == (
        "-- ack: x\n-- transition: active | pending | pending (lane) -> (none)\nreturn 1\n"
    )
    with pytest.raises(ValueError, match="exactly one"):
        tool.header_text("ack", "return 1\n")


def test_arrows_render_lanes_schedules_and_settings() -> None:
    assert states.arrow("lane_pause") == "lane any -> paused | waiting"
    assert states.arrow("lane_resume") == "lane paused | waiting -> ready | idle"
    assert states.arrow("fire") == "registered -> registered (+ pending | pending (lane))"
    assert states.arrow("counts") == "none (read only)"
    assert states.arrow("register") == "(none) -> registered"


# --- the real scripts against the table -----------------------------------------------------------

LATER_MS = 3_600_000  # a wait that does not end during the test
STRICT = ("s1", "s2")  # lanes of limit 1
OPEN = ("o",)  # a lane without a limit
LANES = STRICT + OPEN


@attrs.define
class Model:
    place: Place
    group: str | None
    attempts: int = 0
    token: int | None = None
    due: bool = False  # scheduled: its time has come
    lease_ms: int = 0  # active: the lease it was given


class Lifecycle(RuleBasedStateMachine):
    """Jobs moved by the bus's own functions; the model moves them by ``states.next_place``."""

    bus: Bus

    def __init__(self) -> None:
        super().__init__()
        self.queue = "t.states." + uuid.uuid4().hex[:10]
        self.jobs: dict[str, Model] = {}
        self.waiting: set[str] = set()  # lanes waiting until LATER_MS from their hold
        self.deadline = 0  # the latest short lease given
        for g in STRICT:  # strict from the start, whichever script first puts a job there
            assert self.run(lanes.configure, g, limit=1) == (1, 1)

    def run(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        async def call() -> T:
            with trio.fail_after(10):
                return await fn(self.bus, self.queue, *args, **kwargs)

        return trio.from_thread.run(call)

    def where(self, *places: Place) -> list[str]:
        return sorted(i for i, m in self.jobs.items() if m.place in places)

    def alone(self, job_id: str) -> bool:
        """The job is the only one of its lane anywhere (so a hold of the lane holds it alone)."""
        g = self.jobs[job_id].group
        return not any(
            m.group == g and m.place is not Place.NONE for i, m in self.jobs.items() if i != job_id
        )

    def lane_case(self, job_id: str) -> str:
        return "flat" if self.jobs[job_id].group is None else "lane"

    def move(self, job_id: str, script: str, case: str = "") -> None:
        m = self.jobs[job_id]
        m.place = next_place(m.place, script, case)

    # --- admitting --------------------------------------------------------------------------------

    @rule(lane=st.sampled_from((None, None, *LANES)),
          when=st.sampled_from(("now", "now", "due", "later")))  # fmt: skip
    def take_in(self, lane: str | None, when: str) -> None:
        if lane in self.waiting:
            return  # a waiting lane holds its one job alone (see hold)
        if when == "now" and lane is None:
            admitted = self.run(jobs.enqueue, b"x")
            script = "enqueue"
        elif when == "now":
            assert lane is not None
            admitted = self.run(lanes.enqueue, lane, b"x", limit=1 if lane in STRICT else None)
            script = "lane_enqueue"
        else:
            delay = 0 if when == "due" else LATER_MS
            admitted = self.run(jobs.enqueue_in, b"x", delay, group=lane)
            script = "schedule"
        assert admitted.outcome in (Outcome.ENQUEUED, Outcome.SCHEDULED)
        self.jobs[admitted.id] = Model(Place.NONE, lane, due=when == "due")
        self.move(admitted.id, script)

    # --- claiming ---------------------------------------------------------------------------------

    def claimable(self) -> int:
        """How many jobs a claim of any size can take now: the flat ones, a strict lane's head
        when it has none in flight, every job of an open lane."""
        n = len(self.where(Place.PENDING))
        for g in LANES:
            waiting = [i for i in self.where(Place.LANE) if self.jobs[i].group == g]
            if g in STRICT:
                busy = any(self.jobs[i].group == g for i in self.where(Place.ACTIVE))
                n += min(len(waiting), 0 if busy else 1)
            else:
                n += len(waiting)
        return n

    @rule(batch=st.integers(1, 3), short=st.booleans())
    def claim(self, batch: int, short: bool) -> None:
        expected = min(batch, self.claimable())
        got = self.run(jobs.claim, batch, 1 if short else 60_000)
        assert len(got) == expected, (got, expected)
        for job in got:
            m = self.jobs[job.id]
            self.move(job.id, "claim")
            assert job.group == m.group
            m.attempts += 1
            assert job.attempts == m.attempts
            assert m.token is None or job.token > m.token  # the fencing token only grows
            m.token, m.lease_ms = job.token, (1 if short else 60_000)
            if short:
                self.deadline = max(self.deadline, job.lease_deadline_ms)

    # --- settling ---------------------------------------------------------------------------------

    @precondition(lambda self: self.where(Place.ACTIVE, Place.PENDING, Place.LANE))
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        held = [i for i in self.where(Place.ACTIVE, Place.PENDING, Place.LANE)
                if self.jobs[i].token is not None]  # fmt: skip
        if not held:
            return
        job_id = data.draw(st.sampled_from(held))
        m = self.jobs[job_id]
        assert m.token is not None
        assert self.run(jobs.ack, job_id, m.token) is Outcome.ACKED
        case = "" if m.place is Place.ACTIVE else "reaped, not claimed again (its token holds)"
        self.move(job_id, "ack", case)

    @precondition(lambda self: any(m.token is not None for m in self.jobs.values()))
    @rule(data=st.data())
    def ack_a_stale_token(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(
            sorted(i for i, m in self.jobs.items() if m.token is not None)))  # fmt: skip
        m = self.jobs[job_id]
        assert m.token is not None
        want = Outcome.GONE if m.place is Place.NONE else Outcome.STALE
        assert self.run(jobs.ack, job_id, m.token + 1) is want  # nothing moves

    @precondition(lambda self: self.where(Place.ACTIVE))
    @rule(data=st.data(), later=st.booleans(), max_attempts=st.integers(1, 3), buried=st.booleans())
    def retry(self, data: st.DataObject, later: bool, max_attempts: int, buried: bool) -> None:
        job_id = data.draw(st.sampled_from(self.where(Place.ACTIVE)))
        m = self.jobs[job_id]
        assert m.token is not None
        strict = m.group in STRICT
        if buried or m.attempts >= max_attempts:
            case, word = "attempts spent, or buried", Outcome.DEAD
        elif strict and later:
            if not self.alone(job_id):
                return
            case, word = "attempts left, a lane of limit 1, a delay", Outcome.SCHEDULED
        elif strict:
            case, word = "attempts left, a lane of limit 1, no delay", Outcome.SCHEDULED
        else:
            case, word = "attempts left", Outcome.SCHEDULED
        delay = LATER_MS if later else 0
        got = self.run(jobs.retry, job_id, m.token, delay, max_attempts, "boom", buried=buried)
        assert got is word
        self.move(job_id, "retry", case)
        m.due = not later
        if m.place is Place.LANE_WAITING:
            assert m.group is not None
            self.waiting.add(m.group)

    @precondition(lambda self: self.where(Place.ACTIVE))
    @rule(data=st.data(), later=st.booleans())
    def defer(self, data: st.DataObject, later: bool) -> None:
        job_id = data.draw(st.sampled_from(self.where(Place.ACTIVE)))
        m = self.jobs[job_id]
        assert m.token is not None
        if m.group is None:
            case = "flat"
        elif later:
            if not self.alone(job_id):
                return
            case = "a lane, a delay"
        else:
            case = "a lane, no delay"
        got = self.run(jobs.defer, job_id, m.token, LATER_MS if later else 0, "no token")
        assert got is Outcome.DEFERRED
        self.move(job_id, "defer", case)
        m.attempts -= 1  # a deferral spends no attempt
        m.due = not later
        if m.place is Place.LANE_WAITING:
            assert m.group is not None
            self.waiting.add(m.group)

    @precondition(lambda self: self.where(Place.ACTIVE))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(self.where(Place.ACTIVE)))
        m = self.jobs[job_id]
        assert m.token is not None
        assert self.run(jobs.release, [(job_id, m.token)]) == 1
        self.move(job_id, "release", self.lane_case(job_id))
        m.attempts -= 1  # the interrupted attempt is not counted

    # --- the metronome's calls --------------------------------------------------------------------

    @rule()
    def promote(self) -> None:
        due = [i for i in self.where(Place.SCHEDULED) if self.jobs[i].due]
        got = self.run(jobs.promote)
        assert (got.moved, got.lanes_resumed) == (len(due), 0)
        for job_id in due:
            self.move(job_id, "promote", self.lane_case(job_id))

    @rule()
    def reap(self) -> None:
        expired = [i for i in self.where(Place.ACTIVE) if self.jobs[i].lease_ms == 1]
        if expired:  # wait (on the server's clock) until every short lease has run out

            async def after(bus: Bus, _: str) -> None:
                await wait_for(lambda: _past(bus, self.deadline), step=0.001)

            self.run(after)
        assert self.run(jobs.reap).reaped == len(expired)
        for job_id in expired:
            self.move(job_id, "reap", self.lane_case(job_id))  # attempts and token unchanged

    # --- dead jobs --------------------------------------------------------------------------------

    @precondition(lambda self: self.where(Place.DEAD))
    @rule(data=st.data(), keep=st.booleans())
    def replay_or_discard(self, data: st.DataObject, keep: bool) -> None:
        job_id = data.draw(st.sampled_from(self.where(Place.DEAD)))
        m = self.jobs[job_id]
        if keep:
            assert self.run(jobs.replay, job_id) is Outcome.REPLAYED
            self.move(job_id, "replay", self.lane_case(job_id))
            m.attempts = 0
        else:
            assert self.run(jobs.discard, job_id) is Outcome.DISCARDED
            self.move(job_id, "discard")
        for other in self.where(Place.ACTIVE, Place.PENDING, Place.LANE, Place.SCHEDULED):
            word = self.run(jobs.replay, other)
            assert word is Outcome.NOT_DEAD  # only a dead job is replayed
            break

    # --- what the server says after every step ----------------------------------------------------

    @invariant()
    def rows_are_the_model(self) -> None:
        if not self.jobs:
            return
        ids = sorted(self.jobs)

        async def read(bus: Bus, queue: str) -> list[jobs.JobInfo | None]:
            call = protocol.inspect_ids_call(bus.keys(queue), ids)
            return protocol.inspect_ids_reply(await bus.run(call))

        for job_id, info in zip(ids, self.run(read), strict=True):
            m = self.jobs[job_id]
            if m.place is Place.NONE:
                assert info is None, (job_id, info)
                continue
            assert info is not None and info.state is m.place.state, (job_id, m, info)
            assert (info.attempts, info.group) == (m.attempts, m.group), (job_id, m, info)

    @invariant()
    def counts_and_lanes_are_the_model(self) -> None:
        c = self.run(jobs.counts)
        pending = self.where(Place.PENDING, Place.LANE, Place.LANE_WAITING)
        assert (c.pending, c.scheduled, c.active, c.dead) == (
            len(pending), len(self.where(Place.SCHEDULED)), len(self.where(Place.ACTIVE)),
            len(self.where(Place.DEAD)),
        ), c  # fmt: skip
        assert c.lanes == len({self.jobs[i].group for i in pending} - {None}), c
        assert c.waiting_lanes == len(self.waiting), c
        for lane in self.run(lanes.status, list(LANES)):
            assert (lane.wait_until_ms is not None) == (lane.group in self.waiting), lane
        for job_id in self.where(Place.LANE_WAITING):
            assert self.jobs[job_id].group in self.waiting


@pytest.mark.server
@pytest.mark.timeout_s(120)
async def test_the_scripts_move_jobs_as_the_table_says(standalone_only: str) -> None:
    from echomq_trio import open_bus

    async with open_bus(standalone_only) as bus:
        Lifecycle.bus = bus
        config = settings(
            max_examples=150,
            stateful_step_count=40,
            derandomize=True,
            database=None,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        )
        await trio.to_thread.run_sync(
            partial(run_state_machine_as_test, Lifecycle, settings=config)
        )
