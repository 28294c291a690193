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

from echomq_trio import Bus, flows, ids, jobs, lanes, protocol, queues, repeat, states
from echomq_trio.flows import Flow, OnFailure
from echomq_trio.results import Cancelled, Outcome, Registered
from echomq_trio.states import EDGES, JobState, LaneState, Place, RepeatState, next_place
from tests.support import wait_for
from tools import states as tool

T = TypeVar("T")


async def _past(bus: Bus, ms: int) -> bool:
    return await bus.transport.server_time_ms() > ms


# --- the table -----------------------------------------------------------------------------------


async def _now(bus: Bus, _: str) -> int:
    return await bus.transport.server_time_ms()


async def _infos(bus: Bus, queue: str, ids: list[str]) -> list[jobs.JobInfo]:
    found = [await jobs.get_job(bus, queue, i) for i in ids]
    return [i for i in found if i is not None]


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
    # (or, for a flow's parent, from where flows.add puts it)
    assert _reachable({Place.PENDING, Place.SCHEDULED, Place.WAITING_CHILDREN}) == set(Place)
    # and every lane state and recurring schedule state from where each begins
    assert _reachable({states.LaneState.IDLE}) == set(states.LaneState)
    assert _reachable({states.RepeatState.NONE}) == set(states.RepeatState)


def test_a_job_s_life_ends_only_in_none_and_none_is_left_only_by_admitting() -> None:
    """No row is the one terminal place: every other place has an exit to another place, and
    the only moves out of no row are the scripts that admit a job."""
    for place in Place:
        exits = {e.target for e in EDGES if e.source is place and e.target is not place}
        assert exits or place in states.EXPIRES, f"{place.value} has no exit"
    admit = {e.script for e in EDGES if e.source is Place.NONE}
    assert admit == {"enqueue", "lane_enqueue", "schedule", "fire", "debounce", "flow_add"}
    assert all(
        states.SCRIPTS[s].answers
        in ((), ("enqueued", "duplicate"), ("scheduled", "duplicate"),
            ("scheduled", "debounced", "duplicate"))
        for s in admit
    )  # fmt: skip


def test_each_move_has_one_target_and_every_moving_script_moves() -> None:
    keys = [(e.source, e.script, e.case) for e in EDGES]
    assert len(keys) == len(set(keys)), "a (place, script, case) with two targets"
    for name, script in states.SCRIPTS.items():
        assert bool(states.edges_of(name)) == (not script.moves), name
    for e in EDGES:
        assert type(e.source) is type(e.target), e  # each machine moves within itself


def test_next_place_follows_the_table_and_refuses_what_it_lacks() -> None:
    assert next_place(Place.ACTIVE, "retry", "attempts spent, or buried") is Place.DEAD
    assert next_place(Place.DEAD, "replay", "lane") is Place.LANE
    with pytest.raises(ValueError, match="claim does not move dead"):
        next_place(Place.DEAD, "claim")
    with pytest.raises(ValueError, match="no bus script 'nope'"):
        next_place(Place.PENDING, "nope")


def test_stored_states_are_the_server_s_words_and_where_they_wait() -> None:
    assert [str(s) for s in JobState] == [
        "pending",
        "scheduled",
        "active",
        "dead",
        "cancelled",
        "completed",
        "waiting_children",
    ]
    assert {p.state for p in Place} == {None, *JobState}
    assert Place.LANE_WAITING.state is JobState.PENDING
    assert set(states.EXPIRES) == {Place.COMPLETED}  # its row's key TTL, no script
    assert protocol.STATE_SETS == {
        "pending": "pending", "scheduled": "schedule", "active": "active", "dead": "dead",
        "cancelled": "cancelled", "waiting_children": "parents",
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
        "-- ack: x\n-- transition: active | pending | pending (lane) | waiting_children -> "
        "(none) | completed | pending\n"
        "return 1\n"
    )
    with pytest.raises(ValueError, match="exactly one"):
        tool.header_text("ack", "return 1\n")


def test_arrows_render_lanes_schedules_and_settings() -> None:
    assert states.arrow("lane_pause") == "lane any -> paused | waiting"
    assert states.arrow("lane_resume") == "lane paused | waiting -> ready | idle"
    assert states.arrow("fire") == "registered -> registered (+ pending | pending (lane))"
    assert states.arrow("counts") == "none (read only)"
    assert states.arrow("register") == "(none) | registered -> registered"


# --- the real scripts against the table ---------------------------------------------------------

SOON_MS = 30  # a lane's wait the test waits out (on the server's clock) before it promotes
LATER_MS = 3_600_000  # a wait that does not end during the test
DELAYS = {"now": 0, "soon": SOON_MS, "later": LATER_MS}
STRICT = ("s1", "s2")  # lanes of limit 1
OPEN = ("o",)  # a lane without a limit
LANES = STRICT + OPEN
REPEATS = ("r1", "r2")
DELETABLE = (Place.PENDING, Place.LANE, Place.LANE_WAITING, Place.SCHEDULED)
CANCELLABLE = (Place.PENDING, Place.LANE, Place.LANE_WAITING, Place.SCHEDULED, Place.ACTIVE)


@attrs.define
class Model:
    place: Place
    group: str | None
    attempts: int = 0
    token: int | None = None
    due: bool = False  # scheduled: its time has come
    lease_ms: int = 0  # active: the lease it was given
    debounce: str | None = None  # its debounce key (never claimed: it takes enqueues in)
    parent: str | None = None  # a flow's child: its parent (in this queue)
    ignore: bool = False  # a flow's child: its failure is ignored (OnFailure.IGNORE)
    children: tuple[str, ...] = ()  # a flow's parent: its children
    ended: set[str] = attrs.field(factory=set)  # a flow's parent: the children counted ended


@attrs.define
class Repeat:
    state: RepeatState = RepeatState.NONE
    group: str | None = None
    due: bool = False


class Lifecycle(RuleBasedStateMachine):
    """Jobs and recurring schedules moved by the bus's own functions (the metronome's calls
    among them); the model moves them by ``states.next_place``. A lane held until a time holds
    its one job alone (nothing else enters it meanwhile), so each job's place is its own."""

    bus: Bus

    def __init__(self) -> None:
        super().__init__()
        self.queue = "t.states." + uuid.uuid4().hex[:10]
        self.jobs: dict[str, Model] = {}
        self.repeats = {name: Repeat() for name in REPEATS}
        self.waiting: dict[str, int] = {}  # lane -> the server ms its wait ends
        self.later: set[str] = set()  # the waiting lanes held for LATER_MS: they stay held
        self.deadline = 0  # the latest short lease given
        self.keeping = False  # the queue keeps results: an ack keeps the job, completed
        self.walked: set[tuple[Any, str, str]] = set()  # the table's moves made
        for g in STRICT:  # strict from the start, whichever script first puts a job there
            assert self.run(lanes.configure, g, limit=1) == (1, 1)

    def run(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        async def call() -> T:
            with trio.fail_after(10):
                return await fn(self.bus, self.queue, *args, **kwargs)

        return trio.from_thread.run(call)

    def wait_past(self, ms: int) -> None:
        """Wait until the server's clock is past ``ms``."""

        async def past(bus: Bus, _: str) -> None:
            await wait_for(lambda: _past(bus, ms), step=0.001)

        self.run(past)

    def where(self, *places: Place) -> list[str]:
        return sorted(i for i, m in self.jobs.items() if m.place in places)

    def alone(self, job_id: str) -> bool:
        """The job is the only one of its lane anywhere, and no recurring schedule feeds the
        lane (so a hold of the lane holds it alone)."""
        g = self.jobs[job_id].group
        gone = (Place.NONE, Place.COMPLETED, Place.CANCELLED)  # in no lane
        others = (m for i, m in self.jobs.items() if i != job_id and m.place not in gone)
        fed = any(r.group == g and r.state is RepeatState.REGISTERED for r in self.repeats.values())
        return not fed and not any(m.group == g for m in others)

    def pick(self, data: st.DataObject | None | None, job_ids: list[str]) -> str:
        """One of ``job_ids``: drawn, or (a scripted walk, ``data`` None) the newest."""
        if data is None:
            return max(job_ids)
        return data.draw(st.sampled_from(job_ids))

    def lane_case(self, job_id: str) -> str:
        return "flat" if self.jobs[job_id].group is None else "lane"

    def move(self, job_id: str, script: str, case: str = "") -> None:
        m = self.jobs[job_id]
        self.walked.add((m.place, script, case))
        m.place = next_place(m.place, script, case)

    def held(self, job_id: str) -> None:
        """A hold put the job's lane in a wait: note when it ends (the server says)."""
        g = self.jobs[job_id].group
        assert g is not None and self.jobs[job_id].place is Place.LANE_WAITING
        (lane,) = self.run(lanes.status, [g])
        assert lane.wait_until_ms is not None, lane
        self.waiting[g] = lane.wait_until_ms

    # --- admitting --------------------------------------------------------------------------------

    @rule(lane=st.sampled_from((None, None, *LANES)),
          when=st.sampled_from(("now", "now", "due", "later")))  # fmt: skip
    def take_in(self, lane: str | None, when: str) -> None:
        if lane in self.waiting:
            return  # a waiting lane holds its one job alone
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

    def debounced(self, lane: str | None, key: str, ms: int) -> jobs.Admitted:
        if lane is None:
            return self.run(jobs.enqueue, b"d", debounce=key, debounce_ms=ms)
        return self.run(lanes.enqueue, lane, b"d", debounce=key, debounce_ms=ms)

    @rule(lane=st.sampled_from((None, *LANES)), due=st.booleans())
    def debounce(self, lane: str | None, due: bool) -> None:
        """A new period (on the schedule), then an enqueue its job takes in."""
        if lane in self.waiting:
            return  # a waiting lane holds its one job alone
        key = uuid.uuid4().hex[:8]
        ms = 1 if due else LATER_MS
        first = self.debounced(lane, key, ms)
        assert (first.outcome, first.absorbed) == (Outcome.SCHEDULED, 1), first
        self.jobs[first.id] = Model(Place.NONE, lane, debounce=key)
        self.move(first.id, "debounce")
        again = self.debounced(lane, key, ms)
        assert (again.outcome, again.id, again.absorbed) == (Outcome.DEBOUNCED, first.id, 2)
        self.move(first.id, "debounce", "taken in: its run time slides")
        if due:
            assert again.run_at_ms is not None
            self.wait_past(again.run_at_ms)
            self.jobs[first.id].due = True

    def takes_in(self) -> list[str]:
        """Debounced jobs due and never claimed: they take an enqueue in where they are."""
        return [i for i in self.where(Place.PENDING, Place.LANE) if self.jobs[i].debounce
                and self.jobs[i].token is None]  # fmt: skip

    @precondition(lambda self: self.takes_in())
    @rule(data=st.data())
    def debounce_due(self, data: st.DataObject | None) -> None:
        job_id = self.pick(data, self.takes_in())
        m = self.jobs[job_id]
        assert m.debounce is not None
        again = self.debounced(m.group, m.debounce, LATER_MS)
        assert (again.outcome, again.id) == (Outcome.DEBOUNCED, job_id), again
        self.move(job_id, "debounce", "taken in: due already")

    @precondition(lambda self: not self.short_waits())
    @rule(lane=st.sampled_from((None, *OPEN)), drop=st.booleans())
    def expire(self, lane: str | None, drop: bool) -> None:
        """A job admitted past its expiry: the claim that meets it (one that takes every other
        claimable job first) never leases it."""
        assert self.run(queues.set_expired, "drop" if drop else "dead") == (
            "drop" if drop else "dead"
        )
        n = self.claimable()  # the claim takes these, and meets the expired job too
        if lane is None:
            job_id = self.run(jobs.enqueue, b"e", expires_at=1).id
        else:
            job_id = self.run(lanes.enqueue, lane, b"e", expires_at=1).id
        self.claim(n + 1, False)
        self.jobs[job_id] = Model(Place.NONE, lane)
        self.move(job_id, "enqueue" if lane is None else "lane_enqueue")
        self.move(job_id, "claim", "expired, the queue drops expired jobs" if drop else "expired")

    def sweep(self, drop: bool) -> None:
        """Not a rule (the walk's, as it waits): a job of an expiry in each waiting place
        (pending, in an open lane, in a lane that waits, scheduled), none claimed by its
        expiry: the metronome's promote sweeps them."""
        assert self.run(queues.set_expired, "drop" if drop else "dead")
        soon = {"expires_in": SOON_MS}
        lane = "w" + uuid.uuid4().hex[:6]  # a lane of its own, to wait with its one job
        made = [
            (self.run(jobs.enqueue, b"s", **soon).id, None, Place.PENDING),
            (self.run(lanes.enqueue, "o", b"s", **soon).id, "o", Place.LANE),
            (self.run(lanes.enqueue, lane, b"s", **soon).id, lane, Place.LANE_WAITING),
            (self.run(jobs.enqueue_in, b"s", LATER_MS, **soon).id, None, Place.SCHEDULED),
        ]
        until = self.run(lanes.pause_until, lane, self.run(_now) + LATER_MS)
        self.waiting[lane], self.later = until, self.later | {lane}
        for job_id, group, place in made:
            self.jobs[job_id] = Model(place, group)
        latest = max(i.expires_ms or 0 for i in self.run(_infos, [i for i, _, _ in made]))
        self.wait_past(latest)
        self.promote()
        for job_id, _, _ in made:
            self.move(
                job_id, "promote", "expired, the queue drops expired jobs" if drop else "expired"
            )

    # --- flows ------------------------------------------------------------------------------------

    @rule(ignore=st.lists(st.booleans(), min_size=1, max_size=2))
    def add_flow(self, ignore: list[bool]) -> None:
        """A parent with flat children in this queue, each failing its parent or ignored."""
        parent = ids.generate("JOB")
        kids = tuple(ids.generate("JOB") for _ in ignore)  # minted after it: newer
        flow = Flow("p", [Flow("c", job_id=k, on_failure=OnFailure.IGNORE if i else OnFailure.FAIL)
                          for k, i in zip(kids, ignore, strict=True)], job_id=parent)  # fmt: skip
        assert self.run(flows.add, flow).ok
        self.jobs[parent] = Model(Place.NONE, None, children=kids)
        self.move(parent, "flow_add", "a parent")
        for k, i in zip(kids, ignore, strict=True):
            self.jobs[k] = Model(Place.NONE, None, parent=parent, ignore=i)
            self.move(k, "flow_add", "a child without children")

    def child_ended(self, job_id: str, how: str) -> None:
        """A job ended (``how``: completed, died, cancelled, deleted): its parent, while it
        waits, counts it once (completed, or a failure ignored) and goes on after its last, or
        dies of a failure that is not ignored."""
        m = self.jobs[job_id]
        p = None if m.parent is None else self.jobs[m.parent]
        if m.parent is None or p is None or p.place is not Place.WAITING_CHILDREN:
            return
        script = {"completed": "ack", "died": "retry", "cancelled": "cancel",
                  "deleted": "delete"}[how]  # fmt: skip
        if how == "completed" or m.ignore:
            if job_id in p.ended:
                return  # ended before (dead, ignored, then replayed): counted once
            p.ended.add(job_id)
            if len(p.ended) == len(p.children):
                last = "its last child completed" if how == "completed" else (
                    f"its last child {how} (on_fail ignore)")  # fmt: skip
                self.move(m.parent, script, last)
        else:
            self.move(m.parent, script, f"a child {how} (on_fail fail)")

    @precondition(lambda self: self.where(Place.WAITING_CHILDREN))
    @rule(data=st.data())
    def cancel_parent(self, data: st.DataObject | None) -> None:
        """A parent cancelled while it waits takes its waiting children with it; a running
        child runs on."""
        parent = self.pick(data, self.where(Place.WAITING_CHILDREN))
        assert self.run(jobs.cancel, parent, reason="walk") is Cancelled.CANCELLED
        self.move(parent, "cancel")
        for k in self.jobs[parent].children:
            if self.jobs[k].place in (Place.PENDING, Place.SCHEDULED):
                self.move(k, "cancel")

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

    @precondition(lambda self: not self.short_waits())
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

    def short_waits(self) -> list[str]:
        """Lanes held for SOON_MS: until a promote ends their wait, a claim would race it."""
        return sorted(g for g in self.waiting if g not in self.later)

    # --- settling ---------------------------------------------------------------------------------

    @precondition(lambda self: self.where(Place.ACTIVE, Place.PENDING, Place.LANE))
    @rule(data=st.data())
    def ack(self, data: st.DataObject | None) -> None:
        held = [i for i in self.where(Place.ACTIVE, Place.PENDING, Place.LANE)
                if self.jobs[i].token is not None]  # fmt: skip
        if not held:
            return
        job_id = self.pick(data, held)
        m = self.jobs[job_id]
        assert m.token is not None
        assert self.run(jobs.ack, job_id, m.token) is Outcome.ACKED
        if self.keeping:
            case = "results kept" if m.place is Place.ACTIVE else (
                "reaped, not claimed again; results kept")  # fmt: skip
        else:
            case = "" if m.place is Place.ACTIVE else "reaped, not claimed again (its token holds)"
        self.move(job_id, "ack", case)
        self.child_ended(job_id, "completed")

    @rule(on=st.booleans())
    def keep_results(self, on: bool) -> None:
        assert self.run(jobs.keep_results, LATER_MS if on else 0) == (LATER_MS if on else 0)
        self.keeping = on  # a queue setting: no job moves

    @precondition(lambda self: self.where(Place.ACTIVE))
    @rule(data=st.data())
    def progress(self, data: st.DataObject | None) -> None:
        job_id = self.pick(data, self.where(Place.ACTIVE))
        m = self.jobs[job_id]
        assert m.token is not None
        assert self.run(jobs.write_progress, [(job_id, m.token, 50)]) == [Outcome.NOTED]
        assert self.run(jobs.write_progress, [(job_id, m.token + 1, 60)]) == [Outcome.STALE]
        self.move(job_id, "progress")

    @precondition(lambda self: any(m.token is not None for m in self.jobs.values()))
    @rule(data=st.data())
    def ack_a_stale_token(self, data: st.DataObject | None) -> None:
        job_id = self.pick(data, sorted(i for i, m in self.jobs.items() if m.token is not None))
        m = self.jobs[job_id]
        assert m.token is not None
        want = Outcome.GONE if m.place is Place.NONE else Outcome.STALE
        assert self.run(jobs.ack, job_id, m.token + 1) is want  # nothing moves

    def hold(self, job_id: str, delay: str) -> bool:
        """Whether a hold of the job's lane for ``delay`` keeps each job's place its own."""
        return delay == "now" or self.alone(job_id)

    @precondition(lambda self: self.where(Place.ACTIVE))
    @rule(data=st.data(), delay=st.sampled_from(tuple(DELAYS)),
          how=st.sampled_from(("again", "again", "spent", "bury")))  # fmt: skip
    def retry(self, data: st.DataObject | None, delay: str, how: str) -> None:
        job_id = self.pick(data, self.where(Place.ACTIVE))
        m = self.jobs[job_id]
        assert m.token is not None
        strict = m.group in STRICT
        if how != "again":
            case, word = "attempts spent, or buried", Outcome.DEAD
        elif strict and delay != "now":
            if not self.hold(job_id, delay):
                return
            case, word = "attempts left, a lane of limit 1, a delay", Outcome.SCHEDULED
        elif strict:
            case, word = "attempts left, a lane of limit 1, no delay", Outcome.SCHEDULED
        else:
            if delay == "soon":
                return  # a flat job's retry waits on the schedule: now or later only
            case, word = "attempts left", Outcome.SCHEDULED
        most = m.attempts + 1 if how == "again" else m.attempts
        got = self.run(jobs.retry, job_id, m.token, DELAYS[delay], most, "boom",
                       buried=how == "bury")  # fmt: skip
        assert got is word
        self.move(job_id, "retry", case)
        if word is Outcome.DEAD:
            self.child_ended(job_id, "died")
        m.due = delay == "now"
        if m.place is Place.LANE_WAITING:
            self.held(job_id)
            if delay == "later":
                self.later.add(m.group or "")

    @precondition(lambda self: self.where(Place.ACTIVE))
    @rule(data=st.data(), delay=st.sampled_from(tuple(DELAYS)))
    def defer(self, data: st.DataObject | None, delay: str) -> None:
        job_id = self.pick(data, self.where(Place.ACTIVE))
        m = self.jobs[job_id]
        assert m.token is not None
        if m.group is None:
            if delay == "soon":
                return
            case = "flat"
        elif delay != "now":
            if not self.hold(job_id, delay):
                return
            case = "a lane, a delay"
        else:
            case = "a lane, no delay"
        got = self.run(jobs.defer, job_id, m.token, DELAYS[delay], "no token")
        assert got is Outcome.DEFERRED
        self.move(job_id, "defer", case)
        m.attempts -= 1  # a deferral spends no attempt
        m.due = delay == "now"
        if m.place is Place.LANE_WAITING:
            self.held(job_id)
            if delay == "later":
                self.later.add(m.group or "")

    @precondition(lambda self: self.where(Place.ACTIVE))
    @rule(data=st.data())
    def release(self, data: st.DataObject | None) -> None:
        job_id = self.pick(data, self.where(Place.ACTIVE))
        m = self.jobs[job_id]
        assert m.token is not None
        assert self.run(jobs.release, [(job_id, m.token)]) == 1
        self.move(job_id, "release", self.lane_case(job_id))
        m.attempts -= 1  # the interrupted attempt is not counted

    @precondition(lambda self: self.where(Place.ACTIVE))
    @rule(data=st.data())
    def extend(self, data: st.DataObject | None) -> None:
        job_id = self.pick(data, self.where(Place.ACTIVE))
        m = self.jobs[job_id]
        assert m.token is not None
        assert self.run(jobs.extend, [(job_id, m.token)], 60_000).lost == ()
        self.move(job_id, "extend")
        m.lease_ms = 60_000  # renewed: no longer expires during the test

    # --- the metronome's calls --------------------------------------------------------------------

    @rule()
    def promote(self) -> None:
        due = [i for i in self.where(Place.SCHEDULED) if self.jobs[i].due]
        ending = self.short_waits()
        if ending:
            self.wait_past(max(self.waiting[g] for g in ending))
        got = self.run(jobs.promote)
        assert (got.moved, got.lanes_resumed) == (len(due), len(ending)), (got, due, ending)
        for job_id in due:
            self.move(job_id, "promote", self.lane_case(job_id))
        for job_id in self.where(Place.LANE_WAITING):
            if self.jobs[job_id].group in ending:
                self.move(job_id, "promote", "the lane's wait is over")
        for g in ending:
            del self.waiting[g]

    @rule()
    def reap(self) -> None:
        expired = [i for i in self.where(Place.ACTIVE) if self.jobs[i].lease_ms == 1]
        if expired:  # wait (on the server's clock) until every short lease has run out
            self.wait_past(self.deadline)
        assert self.run(jobs.reap).reaped == len(expired)
        for job_id in expired:
            self.move(job_id, "reap", self.lane_case(job_id))  # attempts and token unchanged

    @rule(name=st.sampled_from(REPEATS), lane=st.sampled_from((None, "o")), replace=st.booleans())
    def register(self, name: str, lane: str | None, replace: bool = False) -> None:
        r = self.repeats[name]
        word, _ = self.run(
            partial(repeat.register, replace=replace), name, LATER_MS, b"tick", 0, lane
        )
        if r.state is RepeatState.REGISTERED:
            if replace and lane != r.group:  # another lane: replaced, due at once
                assert word is Registered.REPLACED
                self.walked.add((r.state, "register", "replace"))
                r.group, r.due = lane, True
                return
            assert word is Registered.EXISTS  # left as it is
            return
        assert word is Registered.REGISTERED
        self.walked.add((r.state, "register", ""))
        r.state, r.group, r.due = next_place(r.state, "register"), lane, True

    @rule(name=st.sampled_from(REPEATS))
    def unregister(self, name: str) -> None:
        r = self.repeats[name]
        assert self.run(repeat.cancel, name) is (r.state is RepeatState.REGISTERED)
        if r.state is RepeatState.REGISTERED:
            self.walked.add((r.state, "unregister", ""))
            r.state = next_place(r.state, "unregister")

    @rule()
    def fire(self) -> None:
        due = [r for r in self.repeats.values() if r.due and r.state is RepeatState.REGISTERED]
        if any(r.group in self.waiting for r in due):
            return  # a waiting lane holds its one job alone
        assert self.run(repeat.fire).fired == len(due)
        made = self.run(jobs.list_jobs, JobState.PENDING, 0, 1000)
        for g in LANES:
            made += self.run(lanes.jobs, g, 0, 1000)
        fresh = [info for info in made if info.id not in self.jobs]
        assert sorted(info.group or "" for info in fresh) == sorted(r.group or "" for r in due)
        for info in fresh:
            self.jobs[info.id] = Model(Place.NONE, info.group)
            self.move(info.id, "fire", self.lane_case(info.id))
        for r in due:
            self.walked.add((r.state, "fire", ""))
            r.state, r.due = next_place(r.state, "fire"), False  # next run a period ahead

    @rule(name=st.sampled_from(REPEATS))
    def advance(self, name: str) -> None:
        r = self.repeats[name]
        at = self.run(repeat.advance, name)
        assert (at is not None) == (r.state is RepeatState.REGISTERED), at
        if at is not None:
            self.walked.add((r.state, "advance", ""))
            r.state, r.due = next_place(r.state, "advance"), False  # its next run, not fired

    # --- dead jobs --------------------------------------------------------------------------------

    @precondition(lambda self: self.where(Place.DEAD))
    @rule(data=st.data(), keep=st.booleans())
    def replay_or_discard(self, data: st.DataObject | None, keep: bool) -> None:
        job_id = self.pick(data, self.where(Place.DEAD))
        m = self.jobs[job_id]
        if keep:
            if m.group in self.waiting:
                return  # a waiting lane holds its one job alone
            assert self.run(jobs.replay, job_id) is Outcome.REPLAYED
            self.move(job_id, "replay", self.lane_case(job_id))
            m.attempts = 0
        else:
            assert self.run(jobs.discard, job_id) is Outcome.DISCARDED
            self.move(job_id, "discard")
        for other in self.where(Place.ACTIVE, Place.PENDING, Place.LANE, Place.SCHEDULED):
            assert self.run(jobs.replay, other) is Outcome.NOT_DEAD  # only a dead job is
            assert self.run(jobs.discard, other) is Outcome.NOT_DEAD
            break

    # --- deleting waiting jobs --------------------------------------------------------------------

    @precondition(lambda self: self.where(*DELETABLE, Place.ACTIVE, Place.DEAD))
    @rule(data=st.data())
    def delete(self, data: st.DataObject | None) -> None:
        job_id = self.pick(data, self.where(*DELETABLE, Place.ACTIVE, Place.DEAD))
        m = self.jobs[job_id]
        got = self.run(jobs.delete, job_id)
        if m.place is Place.ACTIVE:
            assert got is Outcome.RUNNING  # nothing moves: cancel a running job
        elif m.place is Place.DEAD:
            assert got is Outcome.NOT_WAITING  # nothing moves: discard a dead job
        else:
            assert got is Outcome.DELETED
            self.move(job_id, "delete")  # a waiting lane keeps its wait
            self.child_ended(job_id, "deleted")

    # --- cancelling -------------------------------------------------------------------------------

    @precondition(lambda self: self.where(*CANCELLABLE))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject | None) -> None:
        job_id = self.pick(data, self.where(*CANCELLABLE))
        m = self.jobs[job_id]
        assert self.run(jobs.cancel, job_id, reason="walk") is Cancelled.CANCELLED
        self.move(job_id, "cancel")
        self.child_ended(job_id, "cancelled")
        assert self.run(jobs.cancel, job_id) is Cancelled.ALREADY_DONE
        if m.token is not None:  # whoever held it last cannot settle it
            assert self.run(jobs.ack, job_id, m.token) is Outcome.STALE

    @precondition(lambda self: self.where(Place.CANCELLED))
    @rule(data=st.data())
    def discard_cancelled(self, data: st.DataObject | None) -> None:
        job_id = self.pick(data, self.where(Place.CANCELLED))
        assert self.run(jobs.replay, job_id) is Outcome.NOT_DEAD
        assert self.run(jobs.discard, job_id) is Outcome.DISCARDED
        self.move(job_id, "discard")

    # --- what the server says after every step ----------------------------------------------------

    @invariant()
    def rows_are_the_model(self) -> None:
        if not self.jobs:
            return
        ids = sorted(self.jobs)

        async def read(bus: Bus, queue: str) -> list[jobs.JobInfo | None]:
            call = protocol.inspect_ids_call(bus.keys(queue), ids)
            return await bus.run(call)

        for job_id, info in zip(ids, self.run(read), strict=True):
            m = self.jobs[job_id]
            if m.place is Place.NONE:
                assert info is None, (job_id, info)
                continue
            assert info is not None and info.state is m.place.state, (job_id, m, info)
            assert (info.attempts, info.group) == (m.attempts, m.group), (job_id, m, info)

    @invariant()
    def counts_lanes_and_repeats_are_the_model(self) -> None:
        c = self.run(jobs.counts)
        pending = self.where(Place.PENDING, Place.LANE, Place.LANE_WAITING)
        assert (c.pending, c.scheduled, c.active, c.dead, c.cancelled, c.waiting_children) == (
            len(pending), len(self.where(Place.SCHEDULED)), len(self.where(Place.ACTIVE)),
            len(self.where(Place.DEAD)), len(self.where(Place.CANCELLED)),
            len(self.where(Place.WAITING_CHILDREN)),
        ), c  # fmt: skip
        assert c.lanes == len({self.jobs[i].group for i in pending} - {None}), c
        assert c.waiting_lanes == len(self.waiting), c
        for lane in self.run(lanes.status, list(LANES)):
            assert lane.wait_until_ms == self.waiting.get(lane.group), lane
        for job_id in self.where(Place.LANE_WAITING):
            assert self.jobs[job_id].group in self.waiting
        live = {n for n, r in self.repeats.items() if r.state is RepeatState.REGISTERED}
        assert {r.name for r in self.run(repeat.list_repeats, 100)} == live
        assert c.repeats == len(live), c


@pytest.mark.server
@pytest.mark.timeout_s(120)  # about 15 s here; slack for a loaded machine
async def test_the_scripts_move_jobs_as_the_table_says(standalone_only: str) -> None:
    from echomq_trio import open_bus

    async with open_bus(standalone_only) as bus:
        Lifecycle.bus = bus
        config = settings(
            max_examples=120,
            stateful_step_count=40,
            derandomize=True,
            database=None,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        )
        run = partial(run_state_machine_as_test, Lifecycle, settings=config)
        await trio.to_thread.run_sync(run)


# A walk along every move of the table a job or a recurring schedule can make without a step of
# the clock (``clock``), flows' included, each step checked as in the stateful test; ``pick``
# takes the newest job.
WALK: list[tuple[str, dict[str, Any]]] = [
    # flows: a parent's children (each newer than it, so picked first) end every way
    ("add_flow", {"ignore": [False]}),
    ("claim", {"batch": 1, "short": False}),
    ("ack", {"data": None}),  # its last child completed: the parent is pending
    ("claim", {"batch": 1, "short": False}),
    ("ack", {"data": None}),
    ("add_flow", {"ignore": [False]}),
    ("claim", {"batch": 1, "short": False}),
    ("retry", {"data": None, "delay": "now", "how": "bury"}),  # the parent dies with it
    ("replay_or_discard", {"data": None, "keep": False}),  # the child
    ("replay_or_discard", {"data": None, "keep": False}),  # the parent
    ("add_flow", {"ignore": [True, True]}),
    ("claim", {"batch": 2, "short": False}),
    ("retry", {"data": None, "delay": "now", "how": "spent"}),  # ignored: the parent waits
    ("replay_or_discard", {"data": None, "keep": True}),  # ended already: counted once
    ("claim", {"batch": 1, "short": False}),
    ("ack", {"data": None}),  # still waits for its other child
    ("retry", {"data": None, "delay": "now", "how": "bury"}),  # its last, ignored: pending
    ("replay_or_discard", {"data": None, "keep": False}),
    ("claim", {"batch": 1, "short": False}),
    ("ack", {"data": None}),
    ("add_flow", {"ignore": [False, True]}),
    ("cancel_parent", {"data": None}),  # its waiting children with it
    ("discard_cancelled", {"data": None}),
    ("discard_cancelled", {"data": None}),
    ("discard_cancelled", {"data": None}),
    ("add_flow", {"ignore": [False]}),
    ("cancel", {"data": None}),  # the child: the parent dies
    ("discard_cancelled", {"data": None}),
    ("replay_or_discard", {"data": None, "keep": False}),
    ("add_flow", {"ignore": [True]}),
    ("cancel", {"data": None}),  # the child, ignored: the parent is pending
    ("discard_cancelled", {"data": None}),
    ("delete", {"data": None}),  # the parent, pending now
    ("add_flow", {"ignore": [False]}),
    ("delete", {"data": None}),  # the child: the parent dies
    ("replay_or_discard", {"data": None, "keep": False}),
    ("add_flow", {"ignore": [True]}),
    ("delete", {"data": None}),  # the child, ignored: the parent is pending
    ("delete", {"data": None}),
    ("keep_results", {"on": True}),
    ("take_in", {"lane": None, "when": "now"}),
    ("claim", {"batch": 1, "short": True}),
    ("reap", {}),
    ("ack", {"data": None}),  # reaped, not claimed again: completed
    ("take_in", {"lane": "o", "when": "now"}),
    ("claim", {"batch": 1, "short": True}),
    ("reap", {}),
    ("ack", {"data": None}),  # from its lane: completed
    ("take_in", {"lane": None, "when": "now"}),
    ("claim", {"batch": 1, "short": False}),
    ("progress", {"data": None}),
    ("ack", {"data": None}),  # completed
    ("keep_results", {"on": False}),
    ("take_in", {"lane": None, "when": "now"}),
    ("cancel", {"data": None}),  # pending
    ("take_in", {"lane": "o", "when": "now"}),
    ("cancel", {"data": None}),  # in its lane
    ("take_in", {"lane": None, "when": "later"}),
    ("cancel", {"data": None}),  # scheduled
    ("take_in", {"lane": "s2", "when": "now"}),
    ("claim", {"batch": 1, "short": False}),
    ("cancel", {"data": None}),  # active
    ("take_in", {"lane": "s2", "when": "now"}),
    ("claim", {"batch": 1, "short": False}),
    ("retry", {"data": None, "delay": "soon", "how": "again"}),
    ("cancel", {"data": None}),  # in its lane, which waits
    ("promote", {}),
    ("discard_cancelled", {"data": None}),
    ("take_in", {"lane": None, "when": "now"}),
    ("claim", {"batch": 1, "short": True}),
    ("reap", {}),
    ("ack", {"data": None}),  # reaped, not claimed again
    ("take_in", {"lane": "s1", "when": "now"}),
    ("claim", {"batch": 1, "short": True}),
    ("reap", {}),
    ("ack", {"data": None}),
    ("take_in", {"lane": None, "when": "due"}),
    ("promote", {}),
    ("claim", {"batch": 1, "short": False}),
    ("extend", {"data": None}),
    ("retry", {"data": None, "delay": "now", "how": "again"}),
    ("promote", {}),
    ("claim", {"batch": 1, "short": False}),
    ("defer", {"data": None, "delay": "now"}),
    ("promote", {}),
    ("claim", {"batch": 1, "short": False}),
    ("release", {"data": None}),
    ("claim", {"batch": 1, "short": False}),
    ("ack", {"data": None}),
    ("take_in", {"lane": "s2", "when": "now"}),
    ("claim", {"batch": 1, "short": False}),
    ("retry", {"data": None, "delay": "soon", "how": "again"}),
    ("promote", {}),  # the lane's wait is over
    ("claim", {"batch": 1, "short": False}),
    ("retry", {"data": None, "delay": "now", "how": "again"}),
    ("claim", {"batch": 1, "short": False}),
    ("defer", {"data": None, "delay": "soon"}),
    ("promote", {}),
    ("claim", {"batch": 1, "short": False}),
    ("defer", {"data": None, "delay": "now"}),
    ("claim", {"batch": 1, "short": False}),
    ("release", {"data": None}),
    ("claim", {"batch": 1, "short": False}),
    ("retry", {"data": None, "delay": "now", "how": "spent"}),
    ("replay_or_discard", {"data": None, "keep": True}),
    ("claim", {"batch": 1, "short": False}),
    ("retry", {"data": None, "delay": "now", "how": "bury"}),
    ("replay_or_discard", {"data": None, "keep": False}),
    ("take_in", {"lane": None, "when": "now"}),
    ("claim", {"batch": 1, "short": False}),
    ("retry", {"data": None, "delay": "now", "how": "spent"}),
    ("replay_or_discard", {"data": None, "keep": True}),
    ("take_in", {"lane": "o", "when": "due"}),
    ("promote", {}),
    ("take_in", {"lane": "s1", "when": "later"}),
    ("register", {"name": "r1", "lane": None}),
    ("register", {"name": "r2", "lane": "o"}),
    ("register", {"name": "r2", "lane": "o"}),  # exists: left as it is
    ("register", {"name": "r2", "lane": "o", "replace": True}),  # the same: left as it is
    ("fire", {}),
    ("register", {"name": "r2", "lane": None, "replace": True}),  # replaced, due at once
    ("fire", {}),
    ("fire", {}),  # nothing due: a period ahead
    ("advance", {"name": "r1"}),
    ("unregister", {"name": "r1"}),
    ("unregister", {"name": "r1"}),  # absent
    ("ack_a_stale_token", {"data": None}),
    ("take_in", {"lane": None, "when": "now"}),
    ("delete", {"data": None}),
    ("take_in", {"lane": "o", "when": "now"}),
    ("delete", {"data": None}),
    ("take_in", {"lane": None, "when": "later"}),
    ("delete", {"data": None}),
    ("take_in", {"lane": "s2", "when": "now"}),
    ("claim", {"batch": 3, "short": False}),
    ("delete", {"data": None}),  # running: refused
    ("defer", {"data": None, "delay": "later"}),
    ("delete", {"data": None}),  # from its waiting lane
    ("debounce", {"lane": None, "due": True}),
    ("promote", {}),
    ("debounce_due", {"data": None}),
    ("debounce", {"lane": "o", "due": True}),
    ("promote", {}),
    ("debounce_due", {"data": None}),
    ("debounce", {"lane": None, "due": False}),
    ("expire", {"lane": None, "drop": False}),
    ("expire", {"lane": "o", "drop": False}),
    ("expire", {"lane": None, "drop": True}),
    ("expire", {"lane": "o", "drop": True}),
    ("sweep", {"drop": False}),
    ("sweep", {"drop": True}),
]


@pytest.mark.server
async def test_a_walk_makes_every_move_of_the_table_on_the_server(standalone_only: str) -> None:
    from echomq_trio import open_bus

    def walk() -> set[tuple[Any, str, str]]:
        machine = Lifecycle()
        for i, (step, kwargs) in enumerate(WALK):
            getattr(machine, step)(**kwargs)
            machine.rows_are_the_model()
            machine.counts_lanes_and_repeats_are_the_model()
            # a short wait is ended by the next promote (a cancel claims nothing: it may come first)
            assert not machine.short_waits() or WALK[i + 1][0] in ("promote", "cancel"), i
        return machine.walked

    async with open_bus(standalone_only) as bus:
        Lifecycle.bus = bus
        walked = await trio.to_thread.run_sync(walk)
    moves = {(e.source, e.script, e.case) for e in EDGES if not isinstance(e.source, LaneState)}
    left = {m for m in moves if m[1] != "clock"} - walked
    assert not left, sorted((s.value, script, case) for s, script, case in left)
