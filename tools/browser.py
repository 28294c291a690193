"""A headless Chromium driven over the DevTools protocol (trio-websocket), for the page tests
(tests/codemojex/game/test_page.py, tests/echomq_trio/test_dashboard.py) and the screenshots
(tools/screenshots.py).

Starts Debian's ``chromium`` with a fresh profile and the flags this workplace needs (no
background networking), opens one page target, and evaluates JavaScript in it.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import trio
from trio_websocket import WebSocketConnection, open_websocket_url

FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--remote-debugging-port=0", "about:blank",
]  # fmt: skip


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Page:
    def __init__(self, ws: WebSocketConnection) -> None:
        self._ws = ws
        self._ids = itertools.count(1)

    async def call(self, method: str, **params: Any) -> Any:
        msg_id = next(self._ids)
        await self._ws.send_message(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            reply = json.loads(await self._ws.get_message())
            if reply.get("id") == msg_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result")

    async def goto(self, url: str) -> None:
        await self.call("Page.navigate", url=url)

    async def evaluate(self, expression: str) -> Any:
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result["result"].get("value")


@asynccontextmanager
async def open_page() -> AsyncIterator[Page]:
    binary = chromium_path()
    assert binary, "chromium is not installed (.ci/run installs Debian's chromium)"
    # Chromium's helper processes may still touch the profile as it goes: ignore cleanup errors.
    with tempfile.TemporaryDirectory(prefix="cm-chromium-", ignore_cleanup_errors=True) as profile:
        proc = await trio.lowlevel.open_process(
            [binary, f"--user-data-dir={profile}", *FLAGS],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group, so all its helpers end with it
        )  # fmt: skip
        try:
            assert proc.stderr is not None
            buf = b""
            with trio.fail_after(30):
                while not (m := re.search(rb"DevTools listening on (ws://\S+)", buf)):
                    chunk = await proc.stderr.receive_some(4096)
                    if not chunk:
                        raise RuntimeError(f"chromium exited: {buf.decode(errors='replace')}")
                    buf += chunk
            port = int(m.group(1).split(b":")[2].split(b"/")[0])
            async with httpx.AsyncClient() as client:
                targets = (await client.get(f"http://127.0.0.1:{port}/json/list")).json()
            page = next(t for t in targets if t["type"] == "page")
            async with (
                trio.open_nursery() as nursery,
                open_websocket_url(page["webSocketDebuggerUrl"], message_queue_size=100) as ws,
            ):
                # Keep stderr drained so chromium never blocks writing to it.
                nursery.start_soon(_drain, proc.stderr)
                yield Page(ws)
                nursery.cancel_scope.cancel()
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            with trio.CancelScope(shield=True, deadline=trio.current_time() + 10):
                await proc.wait()


async def _drain(stream: trio.abc.ReceiveStream) -> None:
    while await stream.receive_some(65536):
        pass
