"""One owner per data directory, and directories only their owner can read.

``DataDir.own(path)`` creates the directory (mode 0700; an existing one is tightened to 0700)
and takes an exclusive lock on ``<path>/lock`` before anything else happens in it. The lock is
``flock(LOCK_EX | LOCK_NB)`` on a file descriptor that is not inherited by child processes, so
the kernel releases it when the owner exits, however it exits (SIGKILL included): a crash never
blocks the next start, and a second owner is refused at once with ``InUse`` naming the holder's
pid (written into the lock file). ``hold(path, what)`` is the same lock for a single file (an
archive database, say).

A start that fails leaves the directory as it found it: ``DataDir.abandon()`` lets go and takes
back what owning made (the directories created for it, the lock file where there was none, the
mode of an existing directory), as long as the start left nothing else there. Removing a lock
file is safe because ``hold`` checks, once it has the lock, that the path still names the file
it locked (else it was removed meanwhile, and it takes the new one).

``write_private(path, text)`` writes a file only its owner can read, atomically: a temporary
file created 0600 before any content, then renamed over the old one.

Blocking but instant (no waiting for the lock): call it from trio code directly.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import tempfile
from pathlib import Path
from types import TracebackType

import attrs

__all__ = ["DataDir", "InUse", "OwnerLock", "hold", "private_dir", "write_private"]

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
LOCK_FILE = "lock"
_HOLD_TRIES = 10  # a lock file removed this often while we took it: give up (InUse)


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
    for _ in range(_HOLD_TRIES):
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            # The holder writes its pid just after it takes the lock: a start that meets the
            # lock in between asks the kernel's lock table instead.
            pid = _read_pid(fd) or _flock_holder(fd)
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise InUse(what, pid) from None
            raise
        if _same_file(fd, lock_path):
            os.ftruncate(fd, 0)
            with contextlib.suppress(OSError):  # a full disk: the lock holds, unsigned
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            return OwnerLock(lock_path, fd)
        os.close(fd)  # an owner that gave up removed this file after we opened it: try anew
    raise InUse(what, None)


def _same_file(fd: int, path: Path) -> bool:
    try:
        named = path.stat()
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def _flock_holder(fd: int) -> int | None:
    """The pid that took the ``flock`` on ``fd``'s file, from ``/proc/locks`` (Linux; ``None``
    elsewhere, or if it is not listed)."""
    inode = os.fstat(fd).st_ino
    try:
        with open("/proc/locks") as table:
            rows = table.read().splitlines()
    except OSError:
        return None
    for row in rows:
        fields = row.split()
        # "1: FLOCK  ADVISORY  WRITE 7943 08:01:1234 0 EOF" (a blocked waiter's row has "->")
        if len(fields) >= 6 and fields[1] == "FLOCK" and "->" not in fields:
            place = fields[5].split(":")
            if len(place) == 3 and place[2].isdigit() and int(place[2]) == inode:
                return int(fields[4]) if fields[4].isdigit() else None
    return None


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None


def private_dir(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` (and missing parents) readable by its owner only; tighten an existing
    directory of ours to 0700. Returns the resolved path."""
    return _make_private_dir(path)[0]


def _make_private_dir(path: str | os.PathLike[str]) -> tuple[Path, tuple[Path, ...], int | None]:
    """``private_dir``, and what it did: the directories it created (the deepest first) and the
    mode an existing directory had before it was tightened (``None``: left as it was)."""
    folder = Path(path).resolve()
    missing: list[Path] = []
    at = folder
    while not at.exists() and at != at.parent:
        missing.append(at)
        at = at.parent
    folder.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    made = tuple(d for d in missing if d.is_dir())
    mode_before = None
    info = folder.stat()
    if info.st_uid == os.getuid() and info.st_mode & 0o077:
        mode_before = info.st_mode & 0o7777
        folder.chmod(PRIVATE_DIR_MODE)
    return folder, made, None if folder in made else mode_before


def write_private(path: Path, text: str) -> None:
    """Replace ``path`` with ``text``, readable by its owner only (0600), atomically: a crash
    leaves the old file or the new one, never a partial one, and no moment shows the content
    under a wider mode (the temporary file is created 0600, before anything is written)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-")  # mode 0600
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@attrs.define(eq=False)
class DataDir:
    """A data directory this process owns: private (0700) and locked for the process's life.

    Use ``DataDir.own(path)`` (or ``with DataDir.own(path) as d:``); pass it wherever a data
    directory is taken (``open_bus(data_dir=...)``) so the same process does not lock twice.
    ``abandon()`` instead of ``release()`` when the start it was owned for failed."""

    path: Path
    lock: OwnerLock
    made: tuple[Path, ...] = ()  # directories ``own`` created, the deepest first
    found: frozenset[str] = frozenset()  # the directory's entries when it was owned
    mode_before: int | None = None  # an existing directory's mode before it was tightened

    @classmethod
    def own(cls, path: str | os.PathLike[str]) -> DataDir:
        for _ in range(_HOLD_TRIES):
            folder, made, mode_before = _make_private_dir(path)
            try:
                found = frozenset(os.listdir(folder))
                lock = hold(folder / LOCK_FILE, f"data directory {folder}")
            except FileNotFoundError:  # an owner that gave up removed it meanwhile: anew
                continue
            except BaseException:
                _undo(folder, made, mode_before)
                raise
            return cls(folder, lock, made, found, mode_before)
        raise InUse(f"data directory {Path(path).resolve()}", None)

    def release(self) -> None:
        self.lock.release()

    def abandon(self) -> None:
        """Let go after a start that failed, leaving the directory as it was found: remove the
        lock file if there was none, the directories ``own`` created, and give an existing
        directory its mode back; all only if the start left nothing else in it (a directory
        holding something new is released and kept as it is)."""
        try:
            now = set(os.listdir(self.path))
        except OSError:
            now = None
        if now is None or now - {LOCK_FILE} != self.found - {LOCK_FILE}:
            self.release()
            return
        if LOCK_FILE not in self.found and self.lock.held:  # removed while still held
            with contextlib.suppress(OSError):
                (self.path / LOCK_FILE).unlink()
        self.release()
        _undo(self.path, self.made, self.mode_before)

    def __enter__(self) -> DataDir:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def _undo(folder: Path, made: tuple[Path, ...], mode_before: int | None) -> None:
    """Remove the (empty) directories ``_make_private_dir`` created, deepest first; give an
    existing one its mode back."""
    for made_dir in made:
        with contextlib.suppress(OSError):  # not empty: someone else's now
            made_dir.rmdir()
    if mode_before is not None:
        with contextlib.suppress(OSError):
            folder.chmod(mode_before)
