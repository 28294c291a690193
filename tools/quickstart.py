"""The README's quick start, run as a person runs it: ``python -m codemojex.run`` in an empty
folder, with the Python that runs this file.

    python tools/quickstart.py [--timeout 120]

It starts the service (its data in ``./codemojex-data`` of a fresh temporary folder; the page
and the feed on free ports, given through the environment so the command stays the README's),
waits for its first screen and its first summary line, fetches the leaderboard page, then
presses Ctrl-C (SIGINT) and waits for a clean exit: status 0, a ``stopped`` line, no traceback.
It prints one line saying so and exits 0, or prints what it saw and exits 1.

Run it by path (not ``-m``) from outside the repository to exercise an installed package: the
folder holding this file goes on ``sys.path``, the repository's root does not.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile

import httpx
import trio

READY = r"^codemojex is running\. Leaderboard: (http://\S+)"
SUMMARY = r"^notices sent \d+"
STOP_WITHIN_S = 30


class Output:
    """The service's output (stdout and stderr), line by line, everything kept."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self.stream = stream
        self.buf = b""
        self.seen: list[str] = []

    async def until(self, pattern: str) -> re.Match[str]:
        """The first line from here on that matches; AssertionError if the output ends."""
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                text = line.decode(errors="replace")
                self.seen.append(text)
                if found := re.search(pattern, text):
                    return found
            chunk = await self.stream.receive_some(4096)
            if not chunk:
                raise AssertionError(f"the output ended before a line matching {pattern!r}")
            self.buf += chunk

    async def rest(self) -> None:
        while chunk := await self.stream.receive_some(4096):
            self.buf += chunk
        self.seen += [t.decode(errors="replace") for t in self.buf.split(b"\n") if t]
        self.buf = b""


async def quick_start(folder: str, ready_within_s: float) -> str:
    """Start, check and stop the service in ``folder``; a line saying what was seen."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CODEMOJEX_", "ECHOMQ_"))}
    env.pop("PYTHONPATH", None)
    env |= {"CODEMOJEX_PAGE_PORT": "0", "CODEMOJEX_FEED_PORT": "0", "CODEMOJEX_SUMMARY_EVERY": "1"}
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "codemojex.run"], cwd=folder, env=env,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    assert proc.stdout is not None
    out = Output(proc.stdout)
    try:
        started = trio.current_time()
        with trio.fail_after(ready_within_s):
            page_url = (await out.until(READY))[1]
            await out.until(SUMMARY)
        first_screen_s = trio.current_time() - started
        async with httpx.AsyncClient(timeout=10) as client:
            page = await client.get(page_url)
        if page.status_code != 200 or "live leaderboard" not in page.text:
            raise AssertionError(f"the leaderboard page answered {page.status_code}")
        proc.send_signal(signal.SIGINT)
        asked = trio.current_time()
        with trio.fail_after(STOP_WITHIN_S):
            await out.rest()
            await proc.wait()
        stop_s = trio.current_time() - asked
        if proc.returncode != 0:
            raise AssertionError(f"exit status {proc.returncode} after Ctrl-C")
        if "stopped" not in out.seen:
            raise AssertionError("no 'stopped' line after Ctrl-C")
        if any("Traceback" in line for line in out.seen):
            raise AssertionError("a traceback in the output")
    except (AssertionError, trio.TooSlowError) as exc:
        raise AssertionError(f"{exc or 'timed out'}; output:\n" + "\n".join(out.seen)) from None
    finally:
        if proc.returncode is None:
            proc.kill()
            with trio.CancelScope(shield=True, deadline=trio.current_time() + 10):
                await proc.wait()
    return (
        f"first screen and summary in {first_screen_s:.1f} s, page {page.status_code}, "
        f"stopped by Ctrl-C with status 0 in {stop_s:.1f} s"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timeout", type=float, default=120,
                        help="seconds to wait for the first screen (default 120)")  # fmt: skip
    args = parser.parse_args(argv)
    version = ".".join(map(str, sys.version_info[:3]))
    with tempfile.TemporaryDirectory(prefix="quickstart-") as folder:
        try:
            said = trio.run(quick_start, folder, args.timeout)
            if not os.path.isdir(os.path.join(folder, "codemojex-data")):
                raise AssertionError("no ./codemojex-data made")
        except AssertionError as exc:
            print(f"quick start on Python {version}: FAILED: {exc}")
            return 1
    print(f"quick start on Python {version}: {said}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
