"""The job state machine as data: the one source of the states a job, a lane and a recurring
schedule pass through, and of which script moves them (pure, no I/O; h11's ``_state.py`` is the
model).

Theory of operation. A job's row names its *stored* state, ``JobState`` (``pending``, ``scheduled``,
``active``, ``dead``, ``cancelled``, ``waiting_children`` for a flow's parent waiting for its
children (``flows.add``), and ``completed`` for a finished job kept with its result
while its queue keeps results: what ``inspect`` answers and ``JobInfo.state`` holds); a missing
row is no job (never admitted, or acked where no results are kept, or its result expired). The
table is finer: a ``Place`` is where a job is, its stored state and, for a pending job, whether it
waits in the flat set, in a lane, or in a lane that waits until a time. Lanes (``LaneState``) and
recurring schedules (``RepeatState``) are machines of their own. ``EDGES`` lists every move:
(from, script, to) and the case that picks the target when a script has several (a retry with
attempts left, or spent). A script moves only along its edges; ``SCRIPTS`` lists every bus script
with the words it answers, and the scripts that move nothing (settings, bookkeeping, reads) say so.

Everything else is generated or checked from here: the tables and the diagram in
``scripts/README.md`` (``python -m tools.states`` writes them, a test fails when they differ),
each script's ``-- transition:`` header (the same tool writes it; a test checks it),
``protocol.STATE_SETS`` (where each stored state waits), and the stateful test that drives the
real scripts on a real server against ``next_place``.

Rules the table keeps (``tests/echomq_trio/test_states.py``): every place is reachable from
``pending`` or ``scheduled``; a job's life ends only in ``(none)`` (every other place has an
exit, or expires into ``(none)`` by a key TTL: ``EXPIRES``), and ``(none)`` is left only by
admitting a job; each (place, script, case) has one target.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import TypeVar

import attrs

__all__ = [
    "EDGES",
    "EXPIRES",
    "SCRIPTS",
    "Edge",
    "JobState",
    "LaneState",
    "Place",
    "RepeatState",
    "Script",
    "arrow",
    "arrows",
    "edges_of",
    "mermaid",
    "next_place",
    "readme_sections",
]


class JobState(enum.StrEnum):
    """A job's state as its row stores it and ``inspect`` answers it (a pending job's row has no
    ``state`` field: its absence reads as ``pending``)."""

    PENDING = "pending"
    SCHEDULED = "scheduled"
    ACTIVE = "active"
    DEAD = "dead"
    CANCELLED = "cancelled"
    COMPLETED = "completed"  # finished, its row kept with its result until its key TTL
    WAITING_CHILDREN = "waiting_children"  # a flow's parent, until its children have ended

    @property
    def waits_in(self) -> str:
        """The ``keys.SCHEMA`` name of the sorted set the job waits in (a pending lane job waits
        in its lane instead); ``''`` for a completed job (its row alone, no set)."""
        return {"pending": "pending", "scheduled": "schedule", "active": "active", "dead": "dead",
                "cancelled": "cancelled", "completed": "",
                "waiting_children": "parents"}[self.value]  # fmt: skip


class Place(enum.Enum):
    """Where a job is: the states of the table (``scripts/README.md``, "Job states")."""

    NONE = "(none)"
    PENDING = "pending"
    LANE = "pending (lane)"
    LANE_WAITING = "pending (lane, waiting)"
    SCHEDULED = "scheduled"
    ACTIVE = "active"
    DEAD = "dead"
    CANCELLED = "cancelled"
    COMPLETED = "completed"
    WAITING_CHILDREN = "waiting_children"

    @property
    def state(self) -> JobState | None:
        """The stored state of a job in this place; ``None`` for no row."""
        if self is Place.NONE:
            return None
        return JobState(self.value.split(" ", 1)[0])


# Where a job in each place waits and what its score there means: the README's states table.
_WHERE = {
    Place.NONE: ("nowhere: no row (never admitted, or acked)", ""),
    Place.PENDING: (
        "`pending` (flat)",
        "minus its priority (0 by default): pops highest first, then in id (mint) order",
    ),
    Place.LANE: ("`g:<group>`, its lane on the `ring` when serviceable", "minus its priority"),
    Place.LANE_WAITING: ("`g:<group>`, the lane in `gwait` until a time", "minus its priority"),
    Place.SCHEDULED: ("`schedule`", "run-at, ms"),
    Place.ACTIVE: ("`active`", "lease deadline, ms"),
    Place.DEAD: ("`dead`", "time of death, ms"),
    Place.CANCELLED: ("`cancelled`", "time of the cancel, ms"),
    Place.WAITING_CHILDREN: ("`parents`, until its children have ended (flows)", "when added, ms"),
    Place.COMPLETED: ("nowhere: its row (`job:<id>`) alone, with a key TTL (keep_results)", ""),
}

# Places a job leaves by no script: its row expires (a key TTL), and the job is no row.
EXPIRES: dict[Place, str] = {Place.COMPLETED: "its queue's results TTL (keep_results)"}


class LaneState(enum.Enum):
    """A lane: on the ring, empty or at its limit, paused until resumed, waiting until a time."""

    READY = "ready"
    IDLE = "idle"
    PAUSED = "paused"
    WAITING = "waiting"


class RepeatState(enum.Enum):
    """A recurring schedule: no record, or registered (``repeat`` scored by its next run)."""

    NONE = "(none)"
    REGISTERED = "registered"


Node = Place | LaneState | RepeatState


@attrs.frozen
class Edge:
    """``script`` moves a job (lane, schedule) from ``source`` to ``target``; ``case`` names
    what picks this target among the script's others from the same source ('' when only one)."""

    source: Node
    script: str
    target: Node
    case: str = ""


@attrs.frozen
class Script:
    """A bus script: the words it answers (``answers``), or what it answers when not words
    (``returns``); ``moves`` names what a script that moves no state touches ('' for one that
    does)."""

    name: str
    answers: tuple[str, ...] = ()
    returns: str = ""
    moves: str = ""


P, L, R = Place, LaneState, RepeatState
_ALL_LANES = tuple(LaneState)


def _each(sources: Iterable[Node], script: str, target: Node, case: str = "") -> list[Edge]:
    return [Edge(s, script, target, case) for s in sources]


EDGES: tuple[Edge, ...] = (
    Edge(P.NONE, "enqueue", P.PENDING),
    Edge(P.NONE, "lane_enqueue", P.LANE),
    Edge(P.NONE, "schedule", P.SCHEDULED),
    Edge(P.SCHEDULED, "promote", P.PENDING, "flat"),
    Edge(P.SCHEDULED, "promote", P.LANE, "lane"),
    Edge(P.LANE_WAITING, "promote", P.LANE, "the lane's wait is over"),
    Edge(P.PENDING, "claim", P.ACTIVE),
    Edge(P.LANE, "claim", P.ACTIVE),
    # expiry: a job a claim meets past its expires_ms is never leased
    Edge(P.PENDING, "claim", P.DEAD, "expired"),
    Edge(P.LANE, "claim", P.DEAD, "expired"),
    Edge(P.PENDING, "claim", P.NONE, "expired, the queue drops expired jobs"),
    Edge(P.LANE, "claim", P.NONE, "expired, the queue drops expired jobs"),
    # the metronome's promote sweeps waiting jobs past their expiry that no claim met
    *_each((P.PENDING, P.LANE, P.LANE_WAITING, P.SCHEDULED), "promote", P.DEAD, "expired"),
    *_each(
        (P.PENDING, P.LANE, P.LANE_WAITING, P.SCHEDULED),
        "promote",
        P.NONE,
        "expired, the queue drops expired jobs",
    ),
    # debounce: a new period admits a job to the schedule; a waiting job takes the enqueue in
    Edge(P.NONE, "debounce", P.SCHEDULED),
    Edge(P.SCHEDULED, "debounce", P.SCHEDULED, "taken in: its run time slides"),
    Edge(P.PENDING, "debounce", P.PENDING, "taken in: due already"),
    Edge(P.LANE, "debounce", P.LANE, "taken in: due already"),
    Edge(P.ACTIVE, "ack", P.NONE),
    Edge(P.PENDING, "ack", P.NONE, "reaped, not claimed again (its token holds)"),
    Edge(P.LANE, "ack", P.NONE, "reaped, not claimed again (its token holds)"),
    Edge(P.ACTIVE, "ack", P.COMPLETED, "results kept"),
    Edge(P.PENDING, "ack", P.COMPLETED, "reaped, not claimed again; results kept"),
    Edge(P.LANE, "ack", P.COMPLETED, "reaped, not claimed again; results kept"),
    Edge(P.ACTIVE, "retry", P.SCHEDULED, "attempts left"),
    Edge(P.ACTIVE, "retry", P.LANE_WAITING, "attempts left, a lane of limit 1, a delay"),
    Edge(P.ACTIVE, "retry", P.LANE, "attempts left, a lane of limit 1, no delay"),
    Edge(P.ACTIVE, "retry", P.DEAD, "attempts spent, or buried"),
    Edge(P.ACTIVE, "defer", P.LANE_WAITING, "a lane, a delay"),
    Edge(P.ACTIVE, "defer", P.LANE, "a lane, no delay"),
    Edge(P.ACTIVE, "defer", P.SCHEDULED, "flat"),
    Edge(P.ACTIVE, "extend", P.ACTIVE),
    Edge(P.ACTIVE, "progress", P.ACTIVE),
    Edge(P.ACTIVE, "reap", P.PENDING, "flat"),
    Edge(P.ACTIVE, "reap", P.LANE, "lane"),
    Edge(P.ACTIVE, "release", P.PENDING, "flat"),
    Edge(P.ACTIVE, "release", P.LANE, "lane"),
    Edge(P.DEAD, "replay", P.PENDING, "flat"),
    Edge(P.DEAD, "replay", P.LANE, "lane"),
    Edge(P.DEAD, "discard", P.NONE),
    *_each((P.PENDING, P.LANE, P.LANE_WAITING, P.SCHEDULED), "delete", P.NONE),
    Edge(P.CANCELLED, "discard", P.NONE),
    # cancel: a waiting job never runs; an active job's lease is taken from its holder
    *_each((P.PENDING, P.LANE, P.LANE_WAITING, P.SCHEDULED, P.ACTIVE), "cancel", P.CANCELLED),
    # flows: a parent waits for its children; a child's end moves it (its policy: on_fail)
    Edge(P.NONE, "flow_add", P.PENDING, "a child without children"),
    Edge(P.NONE, "flow_add", P.WAITING_CHILDREN, "a parent"),
    Edge(P.WAITING_CHILDREN, "ack", P.PENDING, "its last child completed"),
    Edge(P.WAITING_CHILDREN, "retry", P.DEAD, "a child died (on_fail fail)"),
    Edge(P.WAITING_CHILDREN, "retry", P.PENDING, "its last child died (on_fail ignore)"),
    Edge(P.WAITING_CHILDREN, "cancel", P.CANCELLED),
    Edge(P.WAITING_CHILDREN, "cancel", P.DEAD, "a child cancelled (on_fail fail)"),
    Edge(P.WAITING_CHILDREN, "cancel", P.PENDING, "its last child cancelled (on_fail ignore)"),
    Edge(P.WAITING_CHILDREN, "delete", P.DEAD, "a child deleted (on_fail fail)"),
    Edge(P.WAITING_CHILDREN, "delete", P.PENDING, "its last child deleted (on_fail ignore)"),
    Edge(R.NONE, "register", R.REGISTERED),
    Edge(R.REGISTERED, "register", R.REGISTERED, "replace"),
    Edge(R.REGISTERED, "unregister", R.NONE),
    Edge(R.REGISTERED, "fire", R.REGISTERED),
    Edge(P.NONE, "fire", P.PENDING, "flat"),
    Edge(P.NONE, "fire", P.LANE, "lane"),
    Edge(R.REGISTERED, "advance", R.REGISTERED),
    # clock carries waits across a step of the server clock: each stays where it is.
    *(Edge(s, "clock", s) for s in (P.ACTIVE, P.LANE_WAITING, P.SCHEDULED, R.REGISTERED)),
    *_each(_ALL_LANES, "lane_pause", L.PAUSED, "pause"),
    *_each(_ALL_LANES, "lane_pause", L.WAITING, "until"),
    *_each((L.PAUSED, L.WAITING), "lane_resume", L.READY, "has work"),
    *_each((L.PAUSED, L.WAITING), "lane_resume", L.IDLE, "empty or at its limit"),
    *_each(_ALL_LANES, "lane_config", L.READY, "has work"),
    *_each(_ALL_LANES, "lane_config", L.IDLE, "empty or at its limit"),
)

# In the README's order.
SCRIPTS: dict[str, Script] = {
    s.name: s
    for s in (
        Script("enqueue", ("enqueued", "duplicate")),
        Script("lane_enqueue", ("enqueued", "duplicate")),
        Script("schedule", ("scheduled", "duplicate")),
        Script("debounce", ("scheduled", "debounced", "duplicate")),
        Script("flow_add", ("enqueued", "duplicate")),
        Script("promote", returns="counts"),
        Script("claim", returns="jobs"),
        Script("ack", ("acked", "stale", "gone")),
        Script("retry", ("scheduled", "dead", "stale", "gone")),
        Script("defer", ("deferred", "stale", "gone")),
        Script("extend", returns="a deadline and the ids lost"),
        Script("progress", ("noted", "stale", "gone")),
        Script("reap", returns="counts"),
        Script("release", returns="a count"),
        Script("replay", ("replayed", "not_dead", "gone")),
        Script("discard", ("discarded", "not_dead", "gone")),
        Script("cancel", ("cancelled", "already_done", "not_found")),
        Script("delete", ("deleted", "running", "not_waiting", "gone")),
        Script("register", ("registered", "exists", "replaced")),
        Script("unregister", ("cancelled", "absent")),
        Script("fire", returns="counts"),
        Script("advance", returns="a time"),
        Script("clock", returns="a step and counts"),
        Script("lane_pause", returns="a time"),
        Script("lane_resume", ("resumed", "not_held")),
        Script("lane_config", returns="a limit and a weight"),
        Script("audit_enable", ("on", "off"), moves="a queue setting"),
        Script("queue_pause", ("paused", "already"), moves="a queue setting"),
        Script("queue_resume", ("resumed", "not_paused"), moves="a queue setting"),
        Script("queue_limit", returns="the cap in effect", moves="a queue setting"),
        Script("cap_total", returns="the total and an epoch", moves="a queue setting"),
        Script("cap_share", returns="a partition's cap, fenced", moves="a queue setting"),
        Script("queue_expired", returns="the setting in effect", moves="a queue setting"),
        Script("retention", returns="the settings in effect", moves="a queue setting"),
        Script("keep_results", returns="the TTL in effect", moves="a queue setting"),
        Script("audit_ack", returns="counts", moves="the audit stream"),
        Script("audit_forget", returns="names", moves="the audit stream"),
        Script("count_lanes", returns="counts", moves="a queue's bookkeeping"),
        Script("sync_mark", returns="a server's id", moves="a queue's bookkeeping"),
        Script("counts", returns="counts", moves="read only"),
        Script("inspect", returns="rows", moves="read only"),
        Script("result", returns="a job's state and result", moves="read only"),
        Script("flow", returns="a job's parent and children", moves="read only"),
        Script("lane_status", returns="rows", moves="read only"),
        Script("repeats", returns="rows", moves="read only"),
    )
}


def edges_of(script: str) -> list[Edge]:
    """The edges ``script`` moves along, in table order."""
    if script not in SCRIPTS:
        raise ValueError(f"no bus script {script!r}")
    return [e for e in EDGES if e.script == script]


N = TypeVar("N", Place, LaneState, RepeatState)


def next_place(place: N, script: str, case: str = "") -> N:
    """Where ``script`` takes a job (a lane, a recurring schedule) from ``place`` in ``case``;
    ``ValueError`` when the table has no such move (the script refuses it: ``stale``,
    ``not_dead``...)."""
    for e in edges_of(script):
        if e.source is place and e.case == case:
            target = e.target
            assert isinstance(target, type(place)), e  # a machine's moves stay in it
            return target
    cases = sorted(e.case for e in edges_of(script) if e.source is place)
    raise ValueError(f"{script} does not move {place.value} in case {case!r} ({cases})")


# --- rendering: the scripts' headers and the README -----------------------------------------------


def _unique(nodes: Iterable[Node]) -> list[Node]:
    out: list[Node] = []
    for n in nodes:
        if n not in out:
            out.append(n)
    return out


def _alternatives(nodes: Iterable[Node]) -> str:
    return " | ".join(n.value for n in nodes)


def _parts(script: str) -> tuple[str, str, str, str]:
    """(kind, from, to, created): kind is 'none', 'lane' or 'job' (a recurring schedule moves on
    the same arrow as jobs); created are the places of jobs a script makes beside its own move
    (fire)."""
    s = SCRIPTS[script]
    if s.moves:
        return "none", f"none ({s.moves})", "", ""
    edges = edges_of(script)
    if all(isinstance(e.source, LaneState) for e in edges):
        sources = _unique(e.source for e in edges)
        src = "any" if len(sources) == len(LaneState) else _alternatives(sources)
        return "lane", f"lane {src}", _alternatives(_unique(e.target for e in edges)), ""
    made = [e for e in edges if e.source is Place.NONE]
    own = [e for e in edges if e.source is not Place.NONE]
    if made and own and all(isinstance(e.source, RepeatState) for e in own):
        targets = _unique(e.target for e in made)
        return (
            "job",
            _alternatives(_unique(e.source for e in own)),
            _alternatives(_unique(e.target for e in own)),
            _alternatives(targets),
        )
    return (
        "job",
        _alternatives(_unique(e.source for e in edges)),
        _alternatives(_unique(e.target for e in edges)),
        "",
    )


def arrow(script: str) -> str:
    """The ``-- transition:`` header of ``script``: ``from -> to``, alternatives split by ``|``
    (``lane`` before a lane's states, ``any`` for all of them; jobs a script makes beside its own
    move as ``(+ ...)``), or ``none (what it touches)``."""
    kind, src, tgt, made = _parts(script)
    if kind == "none":
        return src
    return f"{src} -> {tgt}" + (f" (+ {made})" if made else "")


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def _states_table() -> list[str]:
    rows = ["| state | where the job waits | score |", "|---|---|---|"]
    for place in Place:
        where, score = _WHERE[place]
        rows.append(f"| `{place.value}` | {where} | {score} |".replace("|  |", "| |"))
    return rows


def _code_alternatives(text: str) -> str:
    if not text:
        return ""
    lane = text.startswith("lane ")
    parts = [p if p == "any" else f"`{p}`" for p in text.removeprefix("lane ").split(" | ")]
    return ("lane " if lane else "") + " \\| ".join(parts)


def _transitions_table() -> list[str]:
    rows = ["| script | from | to | answers |", "|---|---|---|---|"]
    for name, s in SCRIPTS.items():
        answers = ", ".join(f"`{w}`" for w in s.answers) or s.returns
        kind, src, tgt, made = _parts(name)
        if kind == "none":
            rows.append(f"| `{name}` | {src} | | {answers} |")
            continue
        to = _code_alternatives(tgt)
        if made:
            to += f" (+ {_code_alternatives(made)})"
        rows.append(f"| `{name}` | {_code_alternatives(src)} | {to} | {answers} |")
    return rows


def arrows() -> dict[tuple[Place, Place], list[str]]:
    """The job's moves drawn as arrows: each pair of places a job moves between, with the
    scripts that move it along it, in ``EDGES``' order (for ``mermaid`` and the docs' diagram)."""
    pairs: dict[tuple[Place, Place], list[str]] = {}
    for e in EDGES:
        if isinstance(e.source, Place) and isinstance(e.target, Place):
            names = pairs.setdefault((e.source, e.target), [])
            if e.script not in names:
                names.append(e.script)
    return pairs


def mermaid() -> list[str]:
    """The job's lifecycle as a Mermaid state diagram: one arrow per pair of places, labelled
    with the scripts that move a job along it; ``[*]`` is no row."""
    ids = {p: ("[*]" if p is Place.NONE else p.name.lower()) for p in Place}
    lines = ["```mermaid", "stateDiagram-v2"]
    lines += [f'    state "{p.value}" as {ids[p]}' for p in Place if p is not Place.NONE]
    for (a, b), names in arrows().items():
        lines.append(f"    {ids[a]} --> {ids[b]}: {', '.join(names)}")
    lines += [f"    {ids[p]} --> [*]: expires (a key TTL)" for p in EXPIRES]
    return [*lines, "```"]


def readme_sections() -> dict[str, list[str]]:
    """The generated parts of ``scripts/README.md``, by marker name."""
    return {"states": _states_table(), "transitions": _transitions_table(), "diagram": mermaid()}
