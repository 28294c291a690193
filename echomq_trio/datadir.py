"""One owner per data directory, and directories only their owner can read.

``DataDir.own(path)`` creates the directory (mode 0700; an existing one is tightened to 0700)
and takes an exclusive lock on ``<path>/lock`` before anything else happens in it. The lock is
``flock(LOCK_EX | LOCK_NB)`` on a file descriptor that is not inherited by child processes, so
the kernel releases it when the owner exits, however it exits (SIGKILL included): a crash never
blocks the next start, and a second owner is refused at once with ``InUse`` naming the holder's
pid (written into the lock file). ``hold(path, what)`` is the same lock for a single file (an
archive database, say).

Blocking but instant (no waiting for the lock): call it from trio code directly.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path
from types import TracebackType

import attrs

__all__ = ["DataDir", "InUse", "OwnerLock", "hold", "private_dir"]

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


class InUse(RuntimeError):
    """Another live process holds the lock; ``pid`` is that process (``None`` if unknown)."""

    def __init__(self, what: str, pid: int | None) -> None:
        holder = f"process {pid}" if pid else "another process"
        super().__init__(f"{what} is in use by {holder}; stop it first, or use another one")
        self.what = what
        self.pid = pid


@attrs.define(eq=False)
class OwnerLock:
    """An exclusive lock held until ``release`` or the process's end."""

    path: Path
    _fd: int | None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)  # a stale pid must not name us after we let go
            os.close(fd)  # closing drops the flock


def hold(path: str | os.PathLike[str], what: str) -> OwnerLock:
    """Take the exclusive lock of ``path`` (a lock file, created 0600) or raise ``InUse``.

    ``what`` names the protected thing in the error ("data directory /srv/x")."""
    lock_path = Path(path)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        pid = _read_pid(fd)
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise InUse(what, pid) from None
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return OwnerLock(lock_path, fd)


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None


def private_dir(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` (and missing parents) readable by its owner only; tighten an existing
    directory of ours to 0700. Returns the resolved path."""
    folder = Path(path).resolve()
    folder.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    if folder.stat().st_uid == os.getuid() and folder.stat().st_mode & 0o077:
        folder.chmod(PRIVATE_DIR_MODE)
    return folder


@attrs.define(eq=False)
class DataDir:
    """A data directory this process owns: private (0700) and locked for the process's life.

    Use ``DataDir.own(path)`` (or ``with DataDir.own(path) as d:``); pass it wherever a data
    directory is taken (``open_bus(data_dir=...)``) so the same process does not lock twice."""

    path: Path
    lock: OwnerLock

    @classmethod
    def own(cls, path: str | os.PathLike[str]) -> DataDir:
        folder = private_dir(path)
        return cls(folder, hold(folder / "lock", f"data directory {folder}"))

    def release(self) -> None:
        self.lock.release()

    def __enter__(self) -> DataDir:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
