"""echomq_trio: a durable Valkey/Redis job bus for trio programs.

How the parts fit: ``open_bus`` gives a ``Bus`` (a connection, plus an embedded server when no
URL is given). ``jobs`` holds one function per job transition, each one atomic Lua script timed by
the server clock; ``lanes`` and ``repeat`` the same for fair lanes and recurring schedules,
``queues`` for a whole queue (list them; pause, resume, a cap on jobs in flight); ``events`` and
``audit`` read what the scripts record. Under them, all pure: ``keys`` declares
every key of a queue once (``Bus.keys(q)``), ``checks`` checks input before any I/O,
``protocol`` builds each script's KEYS and ARGV and parses its reply into ``results``. A
``Consumer`` claims jobs in batches and runs a handler on N tasks; a ``Metronome`` promotes
scheduled jobs when they come due and reaps expired leases. Both are trio tasks for your nursery;
cancelling the nursery shuts them down cleanly. A ``Worker`` (``open_worker``) runs both for
one or more queues (``Serve`` entries) with a grace period at shutdown. What a handler's result
does to its job is decided by ``settlement``, pure; ``states`` is the job state machine as a
table (``JobState``, the transitions every script keeps). ``ids`` mints the branded job ids,
``backoff`` computes retry delays, ``cron`` the next run of a cron expression in a time zone
(a ``repeat`` schedule's), ``sequence`` numbered streams (``Seq``: once per number,
in state bounded per stream), ``memory`` reads how full the server is, ``metrics`` exposes
Prometheus metrics (what a consumer and a metronome observe, and the queues' state read per
scrape). Everything talks to
the server through a ``Transport``: ``resp``, the bus's own on trio streams (the one ``open_bus``
gives by default), or ``wire`` on valkey-glide (``transport="glide"``, the only module that
imports the client library); ``testing.FaultyTransport`` wraps one to fail or cancel chosen
calls in tests.

A handler's result can be kept with its finished job and waited for from any process
(``jobs.keep_results``, ``jobs.result``, ``JobHandle``), and a handler reports progress with
``await job.progress(value)``. ``flows`` admits trees of jobs in which a parent runs only after
its children have ended, and reads their results. ``partitions`` spreads one queue over
several hash slots (so over every primary of a cluster): a queue of ``n`` ordinary queues,
routed by lane.
"""

from echomq_trio import (
    audit,
    backoff,
    cron,
    events,
    flows,
    ids,
    jobs,
    lanes,
    memory,
    metrics,
    partitions,
    queues,
    repeat,
    retention,
    sequence,
    settlement,
    states,
)
from echomq_trio._opening import open_bus
from echomq_trio.backoff import Exponential, Fixed, Jitter
from echomq_trio.bus import Bus, CommandArg, Reply
from echomq_trio.consumer import (
    Ack,
    Bury,
    ClaimGate,
    Consumer,
    ConsumerStats,
    DeferIn,
    RetryIn,
    StopConsumer,
)
from echomq_trio.errors import (
    AuthenticationFailed,
    BusError,
    ConnectionLost,
    DamagedAppendOnlyFile,
    JobCancelled,
    JobError,
    JobFailed,
    JobNotFound,
    OutOfMemory,
    PersistenceFailed,
    RequestTimedOut,
    ResultsNotKept,
    ResultTimedOut,
    ServerDied,
    ServerError,
    ServerNotFound,
    ServerNotRunning,
    WritesRefused,
)
from echomq_trio.jobs import Admitted, Job, JobHandle, JobState, Outcome
from echomq_trio.metronome import Metronome, MetronomeStats
from echomq_trio.sequence import Seq
from echomq_trio.transport import Transport
from echomq_trio.worker import QueueStats, Serve, Worker, WorkerState, WorkerStats, open_worker

__all__ = [
    "Ack",
    "Admitted",
    "AuthenticationFailed",
    "Bury",
    "Bus",
    "BusError",
    "ClaimGate",
    "CommandArg",
    "ConnectionLost",
    "Consumer",
    "ConsumerStats",
    "DamagedAppendOnlyFile",
    "DeferIn",
    "Exponential",
    "Fixed",
    "Jitter",
    "Job",
    "JobCancelled",
    "JobError",
    "JobFailed",
    "JobHandle",
    "JobNotFound",
    "JobState",
    "Metronome",
    "MetronomeStats",
    "OutOfMemory",
    "Outcome",
    "PersistenceFailed",
    "QueueStats",
    "Reply",
    "RequestTimedOut",
    "ResultTimedOut",
    "ResultsNotKept",
    "RetryIn",
    "Seq",
    "Serve",
    "ServerDied",
    "ServerError",
    "ServerNotFound",
    "ServerNotRunning",
    "StopConsumer",
    "Transport",
    "Worker",
    "WorkerState",
    "WorkerStats",
    "WritesRefused",
    "audit",
    "backoff",
    "cron",
    "events",
    "flows",
    "ids",
    "jobs",
    "lanes",
    "memory",
    "metrics",
    "open_bus",
    "open_worker",
    "partitions",
    "queues",
    "repeat",
    "retention",
    "sequence",
    "settlement",
    "states",
]
