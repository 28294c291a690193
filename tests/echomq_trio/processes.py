"""Start the helper processes of ``proc.py`` from a test, and make sure they end with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parents[2]


@asynccontextmanager
async def spawn(*args: str, module: str = "tests.echomq_trio.proc") -> AsyncIterator[trio.Process]:
    """Run ``python -m module *args``; SIGKILL it on exit if it is still running."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
    )
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGKILL)
        with trio.CancelScope(shield=True, deadline=trio.current_time() + 10):
            await proc.wait()


async def read_line(proc: trio.Process) -> str:
    assert proc.stdout is not None
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = await proc.stdout.receive_some(1)
        if not chunk:
            raise AssertionError(f"process ended before a line (code {proc.returncode})")
        buf += chunk
    return buf.decode().strip()
