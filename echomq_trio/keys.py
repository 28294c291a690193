"""The key schema of a queue (pure): every key the bus keeps for queue ``q``, declared once.

Every key of queue ``q`` is ``emq:{q}:<suffix>``: the braces are the cluster hash tag, so a queue
lives in one slot and every script touches one slot, on a single server or a cluster. ``SCHEMA``
names each suffix (or pattern, such as ``job:<id>``), its Redis type and what it holds;
``QueueKeys`` gives every one of them by name, and ``QueueKeys.app(name)`` gives an application
keys of its own in the queue's slot (``emq:{q}:app:<name>``), so nothing else spells a key.

The Lua prelude (``scripts/_prelude.lua``) mirrors ``SCHEMA`` line for line in its table ``KEY``
(the fixed part of each key, its type and pattern), and scripts spell every key as the queue
prefix and a ``KEY`` entry (``qp .. KEY.pending``, ``qp .. KEY.job .. id``); a test fails when
the two disagree or a script uses a key that is not declared.
"""

from __future__ import annotations

import attrs

from echomq_trio._checks import check_group, check_job_id, check_name, check_queue

__all__ = [
    "META_GLOB",
    "SCHEMA",
    "WAITAOF_PROBE_KEY",
    "KeySpec",
    "QueueKeys",
    "queue_keys",
    "queue_of_meta",
    "queue_of_prefix",
]


@attrs.frozen
class KeySpec:
    """One key of a queue: ``name`` (as ``QueueKeys`` and the Lua prelude call it), its
    ``pattern`` after ``emq:{q}:`` (``<...>`` marks the variable part), Redis ``type`` and
    ``meaning``."""

    name: str
    pattern: str
    type: str
    meaning: str

    @property
    def stem(self) -> str:
        """The fixed part of the suffix: all of it, or what stands before ``<...>``."""
        return self.pattern.split("<", 1)[0]

    @property
    def variable(self) -> bool:
        """Whether the key has a variable part (one key per job, lane, name, ...)."""
        return "<" in self.pattern


SCHEMA: tuple[KeySpec, ...] = (
    # jobs, by state
    KeySpec("pending", "pending", "zset", "flat jobs ready to claim; score minus the priority (0 by default), so they pop highest first, then in id (mint) order"),  # noqa: E501
    KeySpec("schedule", "schedule", "zset", "scheduled jobs (and retries, flat deferrals); score: run-at ms"),  # noqa: E501
    KeySpec("active", "active", "zset", "leased jobs; score: lease deadline ms"),
    KeySpec("dead", "dead", "zset", "dead jobs; score: time of death ms"),
    KeySpec("expiries", "expiries", "zset", "jobs admitted with an expiry; score: expires_ms (a hint: the row decides; the metronome's promote sweeps those past it)"),  # noqa: E501
    KeySpec("cancelled", "cancelled", "zset", "cancelled jobs, kept for inspection like dead ones; score: time of the cancel ms"),  # noqa: E501
    KeySpec("parents", "parents", "zset", "parents of flows waiting for their children (flows.add); score: when added ms"),  # noqa: E501
    KeySpec("job", "job:<id>", "hash", "a job's row: payload, group, state (none: pending), attempts (none: 0), lease, last_error, failed_ms, repeat, occurrence_ms, delay_ms (a wait of a length on the schedule), timeout_ms, progress (JSON), priority (none: 0), expires_ms (not claimed by then: never run), expires_in_ms (an expiry given as a length: carried across a step of the clock), debounce and debounce_until_ms, debounced (a debounced job's key, its latest run time, the enqueues it stands for); in a flow (flows.add): parent (the parent's queue prefix and id; '' for the flow's root) and on_fail ('ignore'; none: fail) in a child's row, children (their prefixes and ids, space-separated) and unfinished (children not yet ended) in a parent's; and while results are kept: result, finished_ms, with a key TTL (its name is also the channel its end is published on)"),  # noqa: E501
    KeySpec("flow", "flow:<id>", "hash", "a flow parent's children's ends: the child's prefix and id -> 'r:' and its result, 'n:' (completed, no result), 'd:' or 'x:' and the error (dead or cancelled, its failure ignored); deleted or expired with the parent's row"),  # noqa: E501
    KeySpec("idempotency", "key:<key>", "string", "an idempotency key: the id of the job it admitted, with a TTL"),  # noqa: E501
    KeySpec("debounce", "debounce:<key>", "string", "a debounce key: the id of the job that absorbs the key's enqueues while it waits, with a TTL"),  # noqa: E501
    KeySpec("seq", "seq:<scope>", "set", "a numbered stream's highest admitted numbers (at most its window: sequence.Seq), with a TTL renewed by each admission"),  # noqa: E501
    # fair lanes
    KeySpec("lane", "g:<group>", "zset", "a lane's waiting jobs; score minus the priority (0 by default), then id order"),  # noqa: E501
    KeySpec("lane_groups", "groups", "set", "layouts before 2: groups whose lane held waiting jobs; count_lanes reads it once and deletes it"),  # noqa: E501
    KeySpec("old_lane_index", "lanes", "zset", "layouts before 3: the lane index by name; count_lanes reads it once and deletes it"),  # noqa: E501
    KeySpec("lane_index", "gactive", "hash", "the lane index: each lane with waiting jobs, jobs in flight, a pause or a wait -> its jobs in flight, plus 2^32 while jobs wait in it; paged by HSCAN"),  # noqa: E501
    KeySpec("ring", "ring", "list", "lanes being served, round-robin"),
    KeySpec("on_ring", "inring", "set", "the groups on the ring (each at most once)"),
    KeySpec("paused", "paused", "set", "lanes held until resumed"),
    KeySpec("lane_waits", "gwait", "zset", "lanes held until a time; score: the wait's end ms"),
    KeySpec("lane_limits", "glimit", "hash", "group -> most jobs in flight at once"),
    KeySpec("lane_weights", "gweight", "hash", "group -> jobs per round-robin turn"),
    # recurring schedules
    KeySpec("repeats", "repeat", "zset", "registrations by name; score: next run ms"),
    KeySpec("registration", "repeat:<name>", "hash", "a registration: every_ms (or cron and tz), template, group, registered_ms, last_fired_ms, last_job"),  # noqa: E501
    # signals, streams, bookkeeping
    KeySpec("wake", "wake", "list", "wake tokens that parked consumers block on (at most 128)"),
    KeySpec("tick", "tick", "list", "one token that wakes a sleeping metronome"),
    KeySpec("events", "events", "stream", "every transition, capped at about 10,000 entries"),
    KeySpec("cancel_marks", "cancels", "zset", "cancels of active jobs for their holders to see, `<id>:<token>`; score: when the mark can go, ms (a consumer reads its running jobs' marks in one ZMSCORE)"),  # noqa: E501
    KeySpec("audit", "audit", "stream", "settled jobs' records (meta.audit = 1); trimmed by its reader"),  # noqa: E501
    KeySpec("meta", "meta", "hash", "created_ms; audit = 1 when the queue keeps an audit; layout: the layout of its bookkeeping (3; _layouts.UPGRADES); retention: dead_max, dead_max_age_ms, events (0: none), events_maxlen; results_ttl_ms (keep_results); the server clock's steps: clock_step_ms, clock_step_at (the last), clock_total (their sum), clock_fix while its waits are carried, clock_reap_after; lease_max: the longest lease granted; syncs: OnDisk's own writes; paused: since when (ms) the queue is paused (queue_pause); max_active: its cap on jobs in flight (queue_limit); expired: 'drop' when an expired job is deleted rather than kept dead (queue_expired); a partitioned queue's (echomq_trio.partitions, written in Python): partitions, partition 0's count, and partition_of and partition, each other partition's queue and index; its cap on jobs in flight across partitions (cap_total, cap_share): partitions_cap, partitions_epoch, cap_holder and cap_until, partition 0's total, the epoch of its rounds and their lease, and cap_epoch, each partition's last stamped epoch (its share is its max_active)"),  # noqa: E501
    KeySpec("metrics", "metrics", "hash", "running totals: completed, retried, dead, deferred, expired (of the dead or dropped); lane_pending: jobs waiting in lanes; lanes_with_jobs: lanes with waiting jobs"),  # noqa: E501
    # the application's own
    KeySpec("app", "app:<name>", "any", "an application's keys in the queue's slot"),
)  # fmt: skip

_SPECS = {spec.name: spec for spec in SCHEMA}


@attrs.frozen
class QueueKeys:
    """The keys of one queue, every ``SCHEMA`` entry by name: a fixed key is an attribute, a key
    with a variable part a method that checks that part. Built by ``queue_keys``."""

    name: str
    prefix: str  # emq:{q}:
    pending: str = attrs.field(repr=False)
    schedule: str = attrs.field(repr=False)
    active: str = attrs.field(repr=False)
    dead: str = attrs.field(repr=False)
    expiries: str = attrs.field(repr=False)
    cancelled: str = attrs.field(repr=False)
    parents: str = attrs.field(repr=False)
    lane_groups: str = attrs.field(repr=False)
    old_lane_index: str = attrs.field(repr=False)
    lane_index: str = attrs.field(repr=False)
    ring: str = attrs.field(repr=False)
    on_ring: str = attrs.field(repr=False)
    paused: str = attrs.field(repr=False)
    lane_waits: str = attrs.field(repr=False)
    lane_limits: str = attrs.field(repr=False)
    lane_weights: str = attrs.field(repr=False)
    repeats: str = attrs.field(repr=False)
    wake: str = attrs.field(repr=False)
    tick: str = attrs.field(repr=False)
    events: str = attrs.field(repr=False)
    cancel_marks: str = attrs.field(repr=False)
    audit: str = attrs.field(repr=False)
    meta: str = attrs.field(repr=False)
    metrics: str = attrs.field(repr=False)

    def job(self, job_id: str) -> str:
        """A job's row (checks that ``job_id`` is a branded ``JOB`` id)."""
        return self._part("job", check_job_id(job_id))

    def flow(self, job_id: str) -> str:
        """A flow parent's children's ends (checks that ``job_id`` is a branded ``JOB`` id)."""
        return self._part("flow", check_job_id(job_id))

    def idempotency(self, key: str) -> str:
        """Where an idempotency key is remembered (checks the key)."""
        return self._part("idempotency", check_name("idempotency key", key))

    def debounce(self, key: str) -> str:
        """Where a debounce key names its waiting job (checks the key)."""
        return self._part("debounce", check_name("debounce key", key))

    def seq(self, scope: str) -> str:
        """The numbers a numbered stream has admitted lately (checks the scope)."""
        return self._part("seq", check_name("seq scope", scope))

    def lane(self, group: str) -> str:
        """A lane's waiting jobs (checks the group)."""
        return self._part("lane", check_group(group))

    def registration(self, name: str) -> str:
        """A recurring schedule's record (checks the name)."""
        return self._part("registration", check_name("repeat name", name))

    def app(self, name: str) -> str:
        """A key an application keeps in the queue's slot, ``emq:{q}:app:<name>``, so its scripts
        can touch it together with the queue's keys. ``name`` is checked like a queue name
        (1-128 bytes, no braces or whitespace); a name ending in ``:`` makes a prefix for several
        keys (``app("rate:")``)."""
        return self._part("app", check_name("app key name", name))

    def stream(self, name: str) -> str:
        """The stream ``name`` (``"events"`` or ``"audit"``); ``ValueError`` for any other."""
        spec = _SPECS.get(name) if isinstance(name, str) else None
        if spec is None or spec.type != "stream":
            streams = sorted(s.name for s in SCHEMA if s.type == "stream")
            raise ValueError(f"stream must be one of {streams}, got {name!r}")
        return self.prefix + spec.pattern

    def spec_of(self, key: str) -> KeySpec | None:
        """The ``SCHEMA`` entry ``key`` belongs to, or ``None`` for a key that is not this
        queue's (or not declared)."""
        if not key.startswith(self.prefix):
            return None
        suffix = key[len(self.prefix) :]
        for spec in SCHEMA:
            if spec.variable:
                if suffix.startswith(spec.stem) and len(suffix) > len(spec.stem):
                    return spec
            elif suffix == spec.pattern:
                return spec
        return None

    def _part(self, name: str, part: str) -> str:
        return self.prefix + _SPECS[name].stem + part


_ROOT = "emq:"  # every queue key starts so, then the {q} hash tag
# Every used queue has its meta key (the first script to touch a queue writes it): the glob of
# all of them, for listing queues with SCAN (echomq_trio.queues).
META_GLOB = _ROOT + "{*}:" + _SPECS["meta"].pattern
# The one key of the bus outside every queue: a string that storage.waitaof_syncs writes to ask
# the server when its WAITAOF answers; it expires a minute later.
WAITAOF_PROBE_KEY = _ROOT + "waitaof-probe"


def queue_of_meta(key: str) -> str | None:
    """The queue whose ``meta`` key ``key`` is, or ``None`` for any other key."""
    head, tail = _ROOT + "{", "}:" + _SPECS["meta"].pattern
    if not (key.startswith(head) and key.endswith(tail)):
        return None
    try:
        name = key[len(head) : -len(tail)]
        return name if queue_keys(name).meta == key else None
    except ValueError:  # not a name the bus gives a queue
        return None


def queue_of_prefix(prefix: str) -> str | None:
    """The queue whose prefix (``emq:{q}:``) ``prefix`` is, or ``None`` for any other text (a
    flow's rows name a job of any queue by its prefix and id)."""
    head, tail = _ROOT + "{", "}:"
    if not (prefix.startswith(head) and prefix.endswith(tail)):
        return None
    try:
        name = prefix[len(head) : -len(tail)]
        return name if queue_keys(name).prefix == prefix else None
    except ValueError:  # not a name the bus gives a queue
        return None


def queue_keys(queue: str) -> QueueKeys:
    """Check ``queue`` (it must fit inside a hash tag) and return its keys."""
    prefix = f"{_ROOT}{{{check_queue(queue)}}}:"
    fixed = {spec.name: prefix + spec.pattern for spec in SCHEMA if not spec.variable}
    return QueueKeys(name=queue, prefix=prefix, **fixed)
