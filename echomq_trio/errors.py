"""Exceptions of the bus. Callers catch these, never the client library's own."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from servicekit.groups import first_error

__all__ = [
    "AuthenticationFailed",
    "BusError",
    "ConnectionLost",
    "DamagedAppendOnlyFile",
    "JobCancelled",
    "JobError",
    "JobFailed",
    "JobNotFound",
    "OutOfMemory",
    "PersistenceFailed",
    "RequestTimedOut",
    "ResultTimedOut",
    "ResultsNotKept",
    "ServerDied",
    "ServerError",
    "ServerNotFound",
    "ServerNotRunning",
    "WritesRefused",
    "level_of",
    "raising_first",
]


class BusError(Exception):
    """Base of every error the bus raises about the server."""


class ConnectionLost(BusError):
    """The server could not be reached or the connection dropped; retrying later may work."""


class AuthenticationFailed(ConnectionLost):
    """The server refused the URL's credentials (wrong password or user, or none given where one
    is required). Retrying will not help: fix the URL."""


class WritesRefused(ConnectionLost):
    """The server refused a write and will take writes again by itself once what stops it has
    passed: nothing was written (a script is atomic). Like a dropped connection, the consumer,
    the metronome and a settlement wait and try again; a handler that meets it is not failing
    its job (its attempt is given back, see ``settlement``). The wire logs these refusals (at
    most a line every ``wire.REFUSAL_REPORT_EVERY_S`` per connection)."""


class OutOfMemory(WritesRefused):
    """The server refused a write because its memory is at its ceiling (``maxmemory``) and it
    evicts nothing (``noeviction``, as the embedded server runs). It may pass (jobs finish, keys
    expire); if it lasts, raise the server's ``maxmemory`` or find what fills it
    (``INFO memory``, ``MEMORY USAGE <key>``)."""


class PersistenceFailed(WritesRefused):
    """The server refused a write because it cannot write its append-only file or snapshot
    (``MISCONF``: its disk is full, read-only or gone). It holds in memory what the file could
    not take yet and retries the file every second; writes are taken again once it succeeds.
    Free space where its data lives (``storage.Storage`` says where, and how much is free)."""


class RequestTimedOut(BusError):
    """The server did not answer within the request timeout; the request may still have run."""


class ServerError(BusError):
    """The server answered with an error (a script failed, a command was refused)."""


class ServerNotFound(BusError):
    """No server binary could be found to start an embedded server."""


class ServerNotRunning(ConnectionLost):
    """A data directory's record (``server.json``) names no server that can be reached: none ever
    ran there, its owner stopped it, or the server recorded does not answer (its owner was
    killed, or is restarting it). The message names the directory and which; start the owner
    of the directory again, or give a URL."""


class ServerDied(BusError):
    """The embedded server kept dying: more restarts than its budget allows in its window. The
    ``open_bus``/``start_server`` block that owns it ends with this error; its log tail is in
    the message."""


class DamagedAppendOnlyFile(ServerDied):
    """The embedded server cannot start: its append-only file is damaged (the server refuses to
    load it). Restarting cannot help; the message names the repair command for the data
    directory (``echomq repair --data-dir DIR``, ``echomq_trio.repair``), which keeps a copy of
    the damaged files and cuts the file at the damage."""


class JobError(Exception):
    """Base of what ``jobs.result`` raises about the job it waits on (not about the server:
    those are ``BusError``). ``job_id`` names the job."""

    def __init__(self, message: str, job_id: str) -> None:
        super().__init__(message)
        self.job_id = job_id


class JobFailed(JobError):
    """The job is dead (out of attempts, or buried): ``error`` is its last error. Replay it
    (``jobs.replay``) to run it again."""

    def __init__(self, job_id: str, error: str) -> None:
        super().__init__(f"job {job_id} is dead: {error}", job_id)
        self.error = error


class JobCancelled(JobError):
    """The job was cancelled: it never finishes. ``reason`` is what the canceller gave."""

    def __init__(self, job_id: str, reason: str = "") -> None:
        super().__init__(f"job {job_id} was cancelled" + (f": {reason}" if reason else ""), job_id)
        self.reason = reason


class JobNotFound(JobError):
    """No such job: never enqueued on this queue, or finished and its result expired (or
    discarded). Check the id and the queue."""

    def __init__(self, job_id: str, queue: str) -> None:
        super().__init__(
            f"no job {job_id} in {queue!r} (never enqueued, or its result expired)", job_id
        )


class ResultsNotKept(JobError):
    """The queue keeps no results, so no result can be waited for: turn them on with
    ``jobs.keep_results(bus, queue, ttl_ms)`` before the jobs finish."""

    def __init__(self, job_id: str, queue: str) -> None:
        super().__init__(
            f"queue {queue!r} keeps no results (jobs.keep_results(bus, queue, ttl_ms) keeps "
            f"them), so job {job_id}'s cannot be waited for",
            job_id,
        )


class ResultTimedOut(JobError, TimeoutError):
    """The job did not finish within the wait's ``timeout_s``; it may still finish (wait
    again)."""

    def __init__(self, job_id: str, timeout_s: float) -> None:
        super().__init__(f"job {job_id} did not finish within {timeout_s:g} s", job_id)


def level_of(exc: BaseException) -> int:
    """The log level of a retried operation's failure: ``WARNING``, or ``DEBUG`` for a refused
    write (``WritesRefused``), which is told once where it is noticed (the wire, at most a line
    every few seconds; ``storage.StorageWatch`` for the embedded server), not by every caller
    that waits it out."""
    return logging.DEBUG if isinstance(exc, WritesRefused) else logging.WARNING


@contextmanager
def raising_first(*kinds: type[BaseException]) -> Iterator[None]:
    """Leaving the block with exception groups that hold one of ``kinds``, raise the first
    such exception itself (from the group); any other exception as it is. For a task whose
    caller expects that exception bare, such as ``StopConsumer``."""
    try:
        yield
    except BaseExceptionGroup as group:
        found = first_error(group, kinds)
        if found is not None:
            raise found from group
        raise
