"""How full the server's memory is: ``memory_use(bus)`` reads ``INFO memory`` (one cheap
command that touches no key) and answers ``MemoryUse``: the server's ``used_memory`` against its
``maxmemory`` ceiling (0: none) and its ``maxmemory_policy``. On a cluster every primary answers
and the one nearest its ceiling is reported. Past the ceiling a ``noeviction`` server refuses
writes (``OutOfMemory``), so a service reports the fraction before it gets there.
``parse_info_memory`` and ``size_text`` are pure."""

from __future__ import annotations

from typing import Protocol

import attrs

from echomq_trio._replies import as_text
from echomq_trio.transport import Transport

__all__ = ["MemoryUse", "memory_use", "parse_info_memory", "size_text"]


class _Carried(Protocol):
    """What ``memory_use`` reads of a ``Bus``: its ``transport`` (the bus's module imports this one,
    through ``storage``, so ``Bus`` is not named here)."""

    @property
    def transport(self) -> Transport: ...


@attrs.frozen
class MemoryUse:
    used_bytes: int
    max_bytes: int  # 0: no ceiling
    policy: str  # "noeviction" on the embedded server

    @property
    def fraction(self) -> float | None:
        """Used memory as a fraction of the ceiling; ``None`` when there is no ceiling."""
        return self.used_bytes / self.max_bytes if self.max_bytes > 0 else None


def parse_info_memory(text: str) -> MemoryUse:
    """The ``INFO memory`` section's ``used_memory``, ``maxmemory`` and ``maxmemory_policy``;
    ``ValueError`` when ``used_memory`` is missing."""
    fields = dict(
        line.split(":", 1) for line in text.splitlines() if ":" in line and not line.startswith("#")
    )
    if "used_memory" not in fields:
        raise ValueError("INFO memory has no used_memory")
    return MemoryUse(
        int(fields["used_memory"]),
        int(fields.get("maxmemory", "0")),
        fields.get("maxmemory_policy", "").strip(),
    )


async def memory_use(bus: _Carried) -> MemoryUse:
    """The server's memory use (on a cluster: the primary nearest its ceiling)."""
    reply = await bus.transport.command("INFO", "memory")
    texts = reply.values() if isinstance(reply, dict) else [reply]
    uses = [parse_info_memory(as_text(t)) for t in texts]
    return max(uses, key=lambda u: (u.fraction or 0.0, u.used_bytes))


def size_text(n: int) -> str:
    """Bytes for people: ``512 B``, ``3.1 MiB``, ``850 MiB``, ``1.0 GiB``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.1f} {unit}" if unit != "B" and size < 10 else f"{size:.0f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")
