"""What the command-line programs of both packages share: an error that is one line for the
user with its exit status, a trio program that SIGINT or SIGTERM stops cleanly, and a quiet end
when the reader of stdout goes away.

``cancel_on_signal(fn, *args)`` runs ``fn`` until it returns or a signal arrives. The first
SIGINT or SIGTERM cancels it, so its nurseries unwind as after any cancellation (consumers hand
their jobs back, an archiver drains) and the answer is ``Stopped(signal)``; a second one while
that clean stop runs ends the process at once with exit status 128 + N, as a shell reports for a
program the signal killed.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import TypeVar, TypeVarTuple

import attrs
import trio

from servicekit.groups import first_error

__all__ = ["CliError", "Stopped", "cancel_on_signal", "first_error", "silence_stdout"]

T = TypeVar("T")
Args = TypeVarTuple("Args")
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class CliError(Exception):
    """A problem to report in one line; ``status`` is the exit status."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


@attrs.frozen
class Stopped:
    """The program was stopped by ``signal`` (and shut down cleanly)."""

    signal: signal.Signals

    @property
    def exit_status(self) -> int:
        """128 + N: what a shell reports for a program that signal N ended."""
        return 128 + int(self.signal)


async def cancel_on_signal(
    fn: Callable[[*Args], Awaitable[T]],
    *args: *Args,
    announce: Callable[[signal.Signals], None] | None = None,
) -> T | Stopped:
    """``await fn(*args)`` until it returns (its answer) or SIGINT/SIGTERM cancels it
    (``Stopped``). ``announce`` is called with the first signal before the cancellation. A
    second signal during the clean stop exits at once with status 128 + N (one line on stderr).
    Exceptions of ``fn`` come out as they are, not wrapped in an exception group."""
    stopped: list[signal.Signals] = []  # at most one: a second signal exits at once
    work = trio.CancelScope()
    failure: BaseException | None = None
    answer: list[T] = []  # at most one: fn's answer
    with trio.open_signal_receiver(*STOP_SIGNALS) as signals:

        async def watch() -> None:
            async for signum in signals:
                which = signal.Signals(signum)
                if work.cancel_called:
                    # The operator insists: leave now. Locks held by the process are dropped by
                    # the kernel, and children set to die with us go too.
                    print(f"{which.name} again: exiting at once", file=sys.stderr, flush=True)
                    os._exit(128 + int(which))
                stopped.append(which)
                if announce is not None:
                    announce(which)
                work.cancel()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            try:
                with work:
                    answer.append(await fn(*args))
            except BaseException as exc:  # re-raised below, outside the nursery's group
                failure = exc
            finally:
                nursery.cancel_scope.cancel()
    if failure is not None:
        raise failure
    if answer:
        return answer[0]
    return Stopped(stopped[0])  # cancelled by ``work``: only a signal does that


def silence_stdout() -> None:
    """The reader of stdout went away (``| head``): point stdout at devnull, so the flush at exit
    does not fail again and print a warning (the recipe of Python's ``signal`` documentation)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
