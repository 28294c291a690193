"""Refusals that pass by themselves and leave nothing done, told apart from other failures
(pure): ``NOREPLICAS`` (a primary with ``min-replicas-to-write`` that has too few replicas now),
``TRYAGAIN`` and ``CLUSTERDOWN`` (a cluster resharding or failing over), ``LOADING`` (a server
reading its data at a start) and ``MASTERDOWN`` (a replica whose primary is gone). Each refuses
a call before it runs (a script refused at its first write has written nothing), so running it
again is safe: ``Bus.run`` does, with backoff (``delay_s``), until the request timeout, and only
then raises the refusal. A job's attempt is never spent on one: the call it was part of ran
once, later, or raised, as any call that could not reach the server."""

from __future__ import annotations

import re

from echomq_trio.errors import BusError, ConnectionLost

__all__ = ["FIRST_S", "MAX_S", "delay_s", "not_now"]

FIRST_S = 0.01  # the pause after the first refusal, doubling ...
MAX_S = 0.2  # ... to at most this
_NOT_NOW = re.compile(r"\b(NOREPLICAS|TRYAGAIN|CLUSTERDOWN|LOADING|MASTERDOWN)\b")


def not_now(exc: BusError) -> bool:
    """Whether ``exc`` is such a refusal, as the transports raise it (``ConnectionLost`` or its
    ``WritesRefused``, worded by the server). The caller rules out failures that may follow a
    write (``durability.NotDurable`` quotes the refusal that failed its wait)."""
    return isinstance(exc, ConnectionLost) and _NOT_NOW.search(str(exc)) is not None


def delay_s(refusals: int) -> float:
    """The pause after ``refusals`` (>= 1) refusals in a row."""
    return float(min(MAX_S, FIRST_S * 2.0 ** min(refusals - 1, 16)))
