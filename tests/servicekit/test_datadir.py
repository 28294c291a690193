"""``DataDir``: a start that failed gives the directory back as it found it (``abandon``), and
a lock file removed by such a start is never held twice; ``write_private`` is atomic and 0600."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from servicekit.datadir import DataDir, InUse, _same_file, hold, write_private


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_abandon_removes_the_directories_own_created(tmp_path: Path) -> None:
    folder = tmp_path / "a" / "b" / "data"
    owned = DataDir.own(folder)
    assert (folder / "lock").exists()
    assert owned.made == (folder, folder.parent, folder.parent.parent)
    owned.abandon()
    assert list(tmp_path.iterdir()) == [], "the failed start left litter"
    assert not owned.lock.held
    owned.release()  # the `with` block's exit after abandon: harmless
    DataDir.own(folder).release()  # and the path can be owned again


def test_abandon_gives_an_existing_directory_back_as_it_was(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    folder.chmod(0o755)
    (folder / "notes.txt").write_text("mine")
    owned = DataDir.own(folder)
    assert _mode(folder) == 0o700
    owned.abandon()
    assert _mode(folder) == 0o755
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]


def test_abandon_keeps_a_lock_file_that_was_there(tmp_path: Path) -> None:
    DataDir.own(tmp_path / "data").release()  # an earlier run left its lock file
    owned = DataDir.own(tmp_path / "data")
    owned.abandon()
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["lock"]


def test_abandon_keeps_a_directory_the_start_wrote_into(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    owned = DataDir.own(folder)
    (folder / "appendonly.aof").write_text("data")
    owned.abandon()
    assert sorted(p.name for p in folder.iterdir()) == ["appendonly.aof", "lock"]
    assert not owned.lock.held
    DataDir.own(folder).release()


def test_a_refused_owner_changes_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    with DataDir.own(folder):
        with pytest.raises(InUse, match=f"in use by process {os.getpid()}"):
            DataDir.own(folder)
        assert (folder / "lock").exists()


def test_a_refusal_names_the_holder_even_before_it_wrote_its_pid(tmp_path: Path) -> None:
    """The holder writes its pid just after it takes the lock; a second owner meeting the lock
    in between (the file still empty) names the holder from the kernel's lock table."""
    path = tmp_path / "lock"
    lock = hold(path, "the test")
    os.truncate(path, 0)  # as between the holder's flock and its pid
    with pytest.raises(InUse, match=f"the test is in use by process {os.getpid()};"):
        hold(path, "the test")
    lock.release()


def test_a_lock_is_taken_only_on_the_file_its_path_names(tmp_path: Path) -> None:
    """What ``hold`` checks after ``flock``: an owner that gave up may have removed the file
    another opened meanwhile, and a lock on a removed file guards nothing."""
    path = tmp_path / "lock"
    lock = hold(path, "the test")
    assert lock._fd is not None and _same_file(lock._fd, path)
    path.unlink()
    assert not _same_file(lock._fd, path)
    path.touch()
    assert not _same_file(lock._fd, path)
    lock.release()
    again = hold(path, "the test")
    assert again._fd is not None and _same_file(again._fd, path)
    again.release()


def test_write_private_replaces_atomically_with_mode_0600(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_text("old")
    path.chmod(0o644)
    write_private(path, "new")
    assert path.read_text() == "new" and _mode(path) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secret"], "a temporary file was left"
