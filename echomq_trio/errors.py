"""Exceptions of the bus. Callers catch these, never the client library's own."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeVar

__all__ = [
    "AuthenticationFailed",
    "BusError",
    "ConnectionLost",
    "DamagedAppendOnlyFile",
    "OutOfMemory",
    "RequestTimedOut",
    "ServerDied",
    "ServerError",
    "ServerNotFound",
    "first_error",
    "raising_first",
]


class BusError(Exception):
    """Base of every error the bus raises about the server."""


class ConnectionLost(BusError):
    """The server could not be reached or the connection dropped; retrying later may work."""


class AuthenticationFailed(ConnectionLost):
    """The server refused the URL's credentials (wrong password or user, or none given where one
    is required). Retrying will not help: fix the URL."""


class OutOfMemory(ConnectionLost):
    """The server refused a write because its memory is at its ceiling (``maxmemory``) and it
    evicts nothing (``noeviction``, as the embedded server runs): nothing was written. Like a
    dropped connection it may pass (jobs finish, keys expire), so the consumer and the metronome
    retry it; if it lasts, raise the server's ``maxmemory`` or find what fills it
    (``INFO memory``, ``MEMORY USAGE <key>``). The wire logs these refusals."""


class RequestTimedOut(BusError):
    """The server did not answer within the request timeout; the request may still have run."""


class ServerError(BusError):
    """The server answered with an error (a script failed, a command was refused)."""


class ServerNotFound(BusError):
    """No server binary could be found to start an embedded server."""


class ServerDied(BusError):
    """The embedded server kept dying: more restarts than its budget allows in its window. The
    ``open_bus``/``start_server`` block that owns it ends with this error; its log tail is in
    the message."""


class DamagedAppendOnlyFile(ServerDied):
    """The embedded server cannot start: its append-only file is damaged (the server refuses to
    load it). Restarting cannot help; the message names the repair command for the data
    directory (``echomq repair --data-dir DIR``, ``echomq_trio.repair``), which keeps a copy of
    the damaged files and cuts the file at the damage."""


E = TypeVar("E", bound=BaseException)


def first_error(exc: BaseException, kinds: tuple[type[E], ...]) -> E | None:
    """``exc`` if it is one of ``kinds``, else the first such exception in the exception groups
    nested in it (trio hands errors of concurrent tasks back inside groups), else ``None``."""
    if isinstance(exc, kinds):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (found := first_error(inner, kinds)) is not None:
                return found
    return None


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
