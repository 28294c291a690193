"""Helpers the benchmarks in this folder share (reading INFO, cleaning up after ``--url``)."""

from __future__ import annotations

from echomq_trio import Bus
from echomq_trio.protocol import as_text

__all__ = ["drop_queue", "info", "server_version"]


async def info(bus: Bus, section: str) -> dict[str, str]:
    """One INFO section as a dict."""
    text = as_text(await bus.wire.command("INFO", section))
    pairs = (line.split(":", 1) for line in text.splitlines() if ":" in line)
    return {key: value.strip() for key, value in pairs}


async def server_version(bus: Bus) -> str:
    fields = await info(bus, "server")
    valkey = fields.get("valkey_version")
    return f"valkey {valkey}" if valkey else f"redis {fields.get('redis_version', 'unknown')}"


async def drop_queue(bus: Bus, queue: str) -> None:
    """Delete every key of ``queue`` (only for a server given by ``--url``: leave it clean)."""
    pattern = bus.keys(queue).prefix + "*"  # braces are not glob characters
    cursor = "0"
    while True:
        cursor_raw, found = await bus.wire.command(
            "SCAN", cursor, "MATCH", pattern, "COUNT", "10000"
        )
        if found:
            await bus.wire.command("UNLINK", *found)
        cursor = as_text(cursor_raw)
        if cursor == "0":
            return
