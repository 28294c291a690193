"""Telegram's health as one process sees it (pure: no I/O, no clock; the caller passes the time).

An outage of Telegram (a ``Trouble``) begins in one of two ways:

* a send failed as every chat's would (a 5xx, no answer, an answer that is not the Bot API's)
  and ``getMe`` failed too: sending pauses (``OutageGate.close``; ``paused``);
* a request has had no answer for ``hang_after_s`` (``hanging``). That alone pauses nothing: the
  request may still be answered, or time out, and then the probe decides.

However many requests fail during it, it is one outage: one line when it begins (``began``),
one when it ends (``ended``), one count. It ends when a probe succeeds if it paused sending, and
otherwise once a prompt answer of the Bot API's (one that took less than ``hang_after_s``) has
come after it was noticed and no request has waited ``hang_after_s`` (``hang_over``): a Telegram
that answers every request late is one outage, not one per request. ``note`` is its mark on the
service's summary line.
"""

from __future__ import annotations

import attrs

from codemojex.telegram.bot import Answer, InFlight
from servicekit import humane

__all__ = ["Trouble", "began", "ended", "hang_over", "hanging", "note", "paused"]

_HEADLINES = {
    "unanswered": "Telegram has not answered {what}",
    "no_answer": "Telegram does not answer the bot ({what})",
    "server_error": "Telegram answers the bot with server errors ({what})",
    "not_bot_api": "Telegram's answers are not the Bot API's ({what})",
}


@attrs.frozen
class Trouble:
    """One outage: its ``cause`` (``codemojex.telegram.classify.CAUSES``), ``what`` failed (a
    request, or the first failed answer's reason), ``since`` when (trio's clock, s; for a hang
    the hanging request's start) and ``since_ms`` (Unix ms, for people), when it was
    ``noticed`` (trio's clock), and whether sending is ``paused``."""

    cause: str
    what: str
    since: float
    since_ms: int
    noticed: float
    paused: bool = False

    @property
    def headline(self) -> str:
        return _HEADLINES.get(self.cause, "Telegram fails ({what})").format(what=self.what)


def hanging(oldest: InFlight | None, now: float, hang_after_s: float) -> Trouble | None:
    """An outage begins if the oldest request in flight has waited ``hang_after_s``."""
    if oldest is None or now - oldest.started < hang_after_s:
        return None
    return Trouble("unanswered", oldest.describe(), oldest.started, oldest.started_ms, now)


def hang_over(
    trouble: Trouble,
    oldest: InFlight | None,
    last_answer: Answer | None,
    now: float,
    hang_after_s: float,
) -> bool:
    """Whether an outage that paused nothing is over: the last answer of the Bot API's came
    after it was noticed and took less than ``hang_after_s``, and no request in flight has
    waited ``hang_after_s``."""
    if trouble.paused or last_answer is None or last_answer.at <= trouble.noticed:
        return False
    if last_answer.waited >= hang_after_s:
        return False
    return oldest is None or now - oldest.started < hang_after_s


def paused(trouble: Trouble | None, reason: str, cause: str, now: float, now_ms: int) -> Trouble:
    """A probe failed: the outage (this one, or one that begins now) pauses sending."""
    if trouble is None:
        return Trouble(cause, reason, now, now_ms, now, paused=True)
    return attrs.evolve(trouble, paused=True)


def began(trouble: Trouble, now: float) -> str:
    """The one line (a warning) that an outage began."""
    since = humane.iso(trouble.since_ms)
    if trouble.paused:
        return f"{trouble.headline} since {since}, and getMe too: sending paused until it answers"
    waited = now - trouble.since
    return (f"{trouble.headline} since {since} ({waited:.1f} s): it hangs; sending goes on "
            "until getMe gets no answer either")  # fmt: skip


def ended(trouble: Trouble, now: float) -> str:
    """The one line that an outage is over, with how long it lasted."""
    lasted = humane.span(round((now - trouble.since) * 1000))
    resumed = ": sending resumed" if trouble.paused else ""
    return (f"Telegram answers the bot again after {lasted} (outage since "
            f"{humane.iso(trouble.since_ms)}: {trouble.headline}){resumed}")  # fmt: skip


def note(trouble: Trouble | None, now: float) -> str:
    """`` | TELEGRAM OUTAGE 42 s: ... since ...; sending paused`` during an outage, else
    nothing: the mark on the service's summary line."""
    if trouble is None:
        return ""
    lasted = humane.span(round(max(0.0, now - trouble.since) * 1000))
    since = humane.iso(trouble.since_ms)
    paused = "; sending paused" if trouble.paused else ""
    return f" | TELEGRAM OUTAGE {lasted}: {trouble.headline} since {since}{paused}"
