"""What a person reads (pure): a server time in Unix ms as ISO 8601 in UTC, a span as
"3 h 5 min", a time relative to now as "in 3 h" or "5 min ago", and a payload as text with its
emoji as emoji (JSON's ``\\ud83c\\udfc6`` escapes undone). What the CLI, the dashboard and the
service's summary print instead of raw milliseconds and bytes."""

from __future__ import annotations

import json
from datetime import UTC, datetime

__all__ = ["at", "iso", "payload_text", "relative", "span"]

_UNITS = (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000))


def iso(ms: int | None) -> str:
    """``2026-12-01T02:36:16Z`` (UTC, to the second); ``-`` for no time."""
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def span(ms: int) -> str:
    """A length of time in its two largest units, rounded down: ``1 d 3 h``, ``3 h 5 min``,
    ``42 s``; under a second, ``250 ms``. Negative spans are measured as positive."""
    ms = abs(ms)
    if ms < 1000:
        return f"{ms} ms"
    parts = []
    for name, size in _UNITS:
        if ms >= size:
            parts.append(f"{ms // size} {name}")
            ms %= size
        elif parts:
            break
        if len(parts) == 2:
            break
    return " ".join(parts)


def relative(ms: int | None, now_ms: int) -> str:
    """``in 3 h``, ``5 min ago``, or ``now`` within a second; ``-`` for no time."""
    if ms is None:
        return "-"
    delta = ms - now_ms
    if abs(delta) < 1000:
        return "now"
    return f"in {span(delta)}" if delta > 0 else f"{span(delta)} ago"


def at(ms: int | None, now_ms: int) -> str:
    """``2026-12-01T05:36:16Z (in 3 h)``: the time, and how far it is from now."""
    if ms is None:
        return "-"
    return f"{iso(ms)} ({relative(ms, now_ms)})"


def payload_text(data: bytes | str, width: int | None = None) -> str:
    """A payload as a person reads it: JSON re-written without ``\\uXXXX`` escapes (so
    ``"\\ud83c\\udfc6"`` reads 🏆), other text as it is (bytes that are not UTF-8 as U+FFFD),
    newlines as ``\\n``, cut to ``width`` characters with an ellipsis."""
    text = data.decode(errors="replace") if isinstance(data, bytes) else data
    try:
        readable = json.dumps(json.loads(text), ensure_ascii=False)
        readable.encode()  # a lone surrogate escape stays escaped
        text = readable
    except ValueError:  # not JSON (UnicodeEncodeError is one too)
        pass
    text = text.replace("\n", "\\n")
    if width is not None and len(text) > width:
        text = text[: width - 1] + "…"
    return text
