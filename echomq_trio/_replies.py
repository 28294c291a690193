"""Bytes and text of the server's replies (pure): what the transports and the script protocol both
read a reply with. Below ``wire`` (and any transport) and ``protocol``."""

from __future__ import annotations

__all__ = ["as_bytes", "as_text"]


def as_text(value: object) -> str:
    """A server reply (bytes or str) as str."""
    return value.decode() if isinstance(value, bytes) else str(value)


def as_bytes(value: object) -> bytes:
    """A server reply (bytes or str) as bytes."""
    return value if isinstance(value, bytes) else str(value).encode()
