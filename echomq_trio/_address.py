"""How to reach the server of a data directory: ``server.json``, written by the owner of the
embedded server, read by clients (the ``echomq`` command).

Theory of operation:

* **Written by the owner only.** ``start_server`` writes ``data_dir/server.json`` once its
  server answers PING, and again after every supervised restart: the URL (password included),
  host, port, the server's pid and the owner's. The write is atomic and private
  (``datadir.write_private``: a temporary file created 0600 before any content, then renamed),
  in a directory that is 0700 already. A stop by a live owner (a clean exit, an error, the
  supervisor giving up) rewrites it as ``stopped``: the URL and the pid go, the port stays, so
  the next start listens on the same port where it is free (``recorded_port``).
* **Read without trust.** A record that says ``running`` can be stale: an owner killed with
  SIGKILL takes its server along and leaves the file behind. Only connecting tells, so a
  client connects with ``url_of(data_dir)`` and words a refusal with ``not_answering``, which
  says whether the owner is alive (restarting its server) or gone. Reading takes no lock: a
  reader never delays or refuses a start.
* Nothing here logs or prints a URL: the password is in the file and nowhere else.
"""

from __future__ import annotations

import enum
import os
import time
from pathlib import Path

import attrs
from cattrs.preconf.json import make_converter

from echomq_trio.errors import ServerNotRunning
from servicekit import humane
from servicekit.datadir import write_private

__all__ = [
    "ADDRESS_FILE",
    "ServerAddress",
    "State",
    "not_answering",
    "process_state",
    "read",
    "recorded_port",
    "url_of",
    "write",
]

ADDRESS_FILE = "server.json"

_converter = make_converter(forbid_extra_keys=False)  # a newer writer may add fields


class State(enum.Enum):
    RUNNING = "running"
    STOPPED = "stopped"


@attrs.frozen
class ServerAddress:
    """What ``server.json`` holds. ``url`` and ``pid`` are ``None`` once the owner stopped the
    server; ``at_ms`` is when the record was written (Unix ms, this machine's clock)."""

    state: State
    url: str | None
    host: str
    port: int
    pid: int | None
    owner_pid: int
    at_ms: int

    @classmethod
    def running(cls, url: str, host: str, port: int, pid: int) -> ServerAddress:
        """The record of a server that answers now, owned by this process."""
        return cls(State.RUNNING, url, host, port, pid, os.getpid(), _now_ms())

    def stopped(self) -> ServerAddress:
        """The same server, stopped by its owner now: no URL, no pid; the port kept."""
        return attrs.evolve(self, state=State.STOPPED, url=None, pid=None, at_ms=_now_ms())


def _now_ms() -> int:
    return round(time.time() * 1000)


def write(data_dir: Path, address: ServerAddress) -> None:
    """Replace ``data_dir/server.json`` with ``address`` (0600, atomically)."""
    write_private(data_dir / ADDRESS_FILE, _converter.dumps(address) + "\n")


def read(data_dir: Path) -> ServerAddress | None:
    """The record in ``data_dir``, ``None`` if there is none; ``ValueError`` naming the file
    when it cannot be read or is not a record."""
    path = data_dir / ADDRESS_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:  # PermissionError: it is the owner's alone (0600)
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        return _converter.loads(text, ServerAddress)
    except Exception as exc:  # json and cattrs raise several kinds; all mean "not a record"
        raise ValueError(f"{path} is not a server address record ({exc})") from None


def recorded_port(data_dir: Path) -> int | None:
    """The port the last server of ``data_dir`` listened on, if a readable record says."""
    try:
        found = read(data_dir)
    except ValueError:
        return None
    return found.port if found is not None and 0 < found.port < 65536 else None


def url_of(data_dir: Path) -> tuple[str, ServerAddress]:
    """The URL (password included) of the server ``data_dir`` records as running, and the
    record; ``ServerNotRunning`` naming the directory when there is none or it was stopped;
    ``ValueError`` for a file that is not a record. The server may still not answer (a stale
    record): word that with ``not_answering``."""
    if not data_dir.is_dir():
        raise ServerNotRunning(f"no data directory {data_dir}: no server has run there")
    found = read(data_dir)
    if found is None:
        raise ServerNotRunning(
            f"{data_dir} holds no {ADDRESS_FILE}: no embedded server runs there (an owner "
            f"given a URL writes none: use that URL)"
        )
    if found.state is State.STOPPED or found.url is None:
        when = humane.at(found.at_ms, _now_ms())
        raise ServerNotRunning(
            f"the server of {data_dir} is stopped: its owner (pid {found.owner_pid}) stopped it "
            f"at {when}; start the owner again"
        )
    return found.url, found


def not_answering(data_dir: Path, found: ServerAddress) -> ServerNotRunning:
    """The error for a record of a running server that does not answer: stale (its owner is
    gone) or restarting (its owner is alive)."""
    if process_state(found.owner_pid) == "gone":
        why = (f"its owner (pid {found.owner_pid}) ended without stopping it (killed?); "
               "start the owner again")  # fmt: skip
    else:
        why = f"its owner (pid {found.owner_pid}) may be restarting it; try again in a moment"
    return ServerNotRunning(
        f"the server recorded in {data_dir} ({found.host}:{found.port}, pid {found.pid}) does "
        f"not answer: {why}"
    )


def process_state(pid: int) -> str | None:
    """'running', 'gone', or None when this platform cannot tell (no /proc)."""
    if pid <= 0:  # never signal a process group (0) or every process (-1)
        return "gone"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "gone"
    except PermissionError:
        return "running"  # someone else's process
    stat = Path(f"/proc/{pid}/stat")
    if not stat.parent.exists():
        return None if not Path("/proc/self").exists() else "gone"
    try:
        state = stat.read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "gone"
    return "gone" if state in ("Z", "X") else "running"
