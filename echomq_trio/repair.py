"""Repair and restore an embedded server's append-only file, offline: ``echomq repair`` and
``echomq restore`` (the formats and the reading of the checker's output are ``aof``'s, pure).

Theory of operation:

* **Only a stopped server's files.** Both own the data directory first (``DataDir``: the lock
  its service holds while it runs, so they are refused with the holder's pid while it does) and
  refuse a server still running in it. The lock is held until they are done, so the service
  cannot start halfway.
* **The checkers that ship with the server.** The servers dispatch on the name they are run as:
  the server binary run as ``valkey-check-aof`` (``redis-check-aof`` for Redis) is the
  append-only file checker, and run as ``valkey-check-rdb`` the snapshot checker, so a repair
  needs nothing the package does not install. The binary is the one the embedded server would
  run on those files (``server.find_server_binary(data_dir)``); files in the other server's
  snapshot format are refused as such (not damage: ``server.needed_server``). Each file the
  server loads is checked on its own, in the manifest's order (``_aof.loaded_files``): a base
  that is a snapshot with the snapshot checker, every other file with the append-only file
  checker. Not the whole directory at once through its manifest: Valkey 9's ``valkey-check-aof``
  knows only Redis's snapshot signature (``REDIS``), so it calls the base file every Valkey 9
  server writes (``VALKEY080``) damaged (valkey-io/valkey#4739). Only the last file can be cut
  (the servers load a file cut short only when it is the last), so damage elsewhere, or in a
  snapshot, is refused. The checker is run once a file to look (read-only), and, if the last
  file is damaged, once with ``--fix`` on that file, its confirmation prompt answered ``y`` on
  its stdin; then all are checked again.
* **Nothing changed before it is kept.** A repair copies the append-only files into
  ``damaged-aof-<UTC time>/`` in the data directory before the checker cuts anything; a restore
  moves the current ones to ``replaced-aof-<UTC time>/`` and copies the older ones in under a
  temporary name, renamed into place when whole.
* **Said, and recorded.** The repair counts what the cut part held (``_aof.count_cut``) and
  says it in plain words. Before changing anything, both append a ``RepairRecord`` with the
  time to ``repairs.jsonl`` (0600): the server's data goes back to an earlier state, so work
  finished after that state (jobs acked) is pending again; an application that keeps a ledger
  of finished work consults it for the work that predates the record (``rewound_at_ms``;
  codemojex's audit archive, ``codemojex.audit.ledger``). Written first, a record of a repair
  that then failed costs only the consulting.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import attrs
import trio

from echomq_trio import server
from echomq_trio._aof import (
    AOF_DIR,
    REPAIRS_FILE,
    SINGLE_FILE,
    Checked,
    RepairRecord,
    checker_name,
    count_cut,
    encode_record,
    is_rdb,
    last_rewind_ms,
    loaded_files,
    parse_check,
    parse_records,
    server_of,
)
from servicekit.datadir import PRIVATE_FILE_MODE, DataDir, InUse
from servicekit.humane import iso

__all__ = [
    "RepairError",
    "Repaired",
    "describe_repair",
    "describe_restore",
    "read_records",
    "repair",
    "restore",
    "rewound_at_ms",
]

CHECK_TIMEOUT_S = 600.0  # the checker reads the whole file; a large one takes a while


class RepairError(Exception):
    """A repair or restore cannot be done as asked; the message says why and what to do."""


@attrs.frozen
class Repaired:
    """A repair's outcome: ``record`` (``None``: the file was whole, nothing was done)."""

    data_dir: Path
    record: RepairRecord | None


def read_records(data_dir: str | os.PathLike[str]) -> list[RepairRecord]:
    """The repairs and restores recorded in ``data_dir`` (none when there is no record). A line
    that is not a record (cut short by a crash) counts as a repair made at the file's last
    change: the data may have gone back then."""
    path = Path(data_dir) / REPAIRS_FILE
    try:
        text = path.read_text(errors="replace")
        changed_ms = path.stat().st_mtime_ns // 1_000_000
    except FileNotFoundError:
        return []
    records, bad = parse_records(text)
    if bad:
        records.append(RepairRecord("repair", changed_ms))
    return records


def rewound_at_ms(data_dir: str | os.PathLike[str]) -> int | None:
    """When the server's data in ``data_dir`` last went back in time (a repair or a restore,
    Unix ms), or ``None`` if it never did."""
    return last_rewind_ms(read_records(data_dir))


def _record(data_dir: Path, record: RepairRecord) -> None:
    path = data_dir / REPAIRS_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, PRIVATE_FILE_MODE)
    try:
        os.write(fd, (encode_record(record) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _stamp() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


def _free_name(folder: Path, prefix: str) -> Path:
    stamp = _stamp()
    path, n = folder / f"{prefix}-{stamp}", 1
    while path.exists():
        n += 1
        path = folder / f"{prefix}-{stamp}-{n}"
    return path


def _files_of(folder: Path) -> Path | None:
    """The append-only files of a data directory (``appendonlydir/`` or ``appendonly.aof``)."""
    for candidate in (folder / AOF_DIR, folder / SINGLE_FILE):
        if candidate.exists():
            return candidate
    return None


def _manifest(files: Path) -> Path:
    """The manifest of an ``appendonlydir``."""
    manifests = sorted(files.glob("*.manifest"))
    if len(manifests) != 1:
        raise RepairError(f"{files} holds {len(manifests)} manifest files, not one")
    return manifests[0]


def _own(data_dir: str | os.PathLike[str]) -> DataDir:
    folder = Path(data_dir)
    if not folder.is_dir():
        raise RepairError(f"no data directory at {folder}")
    try:
        owned = DataDir.own(folder)
    except InUse as exc:
        raise RepairError(f"{exc} (the service that owns it must be stopped first)") from None
    pid = server._left_behind(owned.path)  # a server its crashed owner left running
    if pid is not None:
        owned.release()
        raise RepairError(f"a server is still running in {owned.path} (pid {pid}); stop it first")
    return owned


async def _check(
    path: Path, binary: str, *, fix: bool = False, rdb: bool = False
) -> tuple[Checked, str]:
    """Run the checker of the server ``binary`` on one file (the snapshot checker with ``rdb``;
    it cannot fix), from the file's folder so that its output names the file as the manifest
    does."""
    argv = [checker_name(binary, rdb=rdb), *(["--fix"] if fix else []), path.name]
    with trio.fail_after(CHECK_TIMEOUT_S):
        done = await trio.run_process(
            argv, executable=binary, cwd=path.parent, stdin=b"y\n" if fix else b"",
            capture_stdout=True, capture_stderr=True, check=False,
        )  # fmt: skip
    output = (done.stdout + done.stderr).decode(errors="replace")
    if rdb:  # a snapshot is whole or not: the checker cannot cut one
        whole = done.returncode == 0
        return Checked(whole, None if whole else path.name, fixable=whole), output
    return parse_check(output, done.returncode), output


@attrs.frozen
class _Part:
    """A file the server loads: its ``path``, whether it is a snapshot (``rdb``), whether it
    is the ``last`` loaded (the only one a repair may cut)."""

    path: Path
    rdb: bool
    last: bool


def _parts(files: Path) -> tuple[list[_Part], str | None]:
    """The files the server loads from ``files``, in order (one for a single file), or what
    is wrong with the manifest that lists them."""
    if not files.is_dir():
        return [_Part(files, rdb=False, last=True)], None
    manifest = _manifest(files)
    try:
        names = loaded_files(manifest.read_text(errors="replace"))
    except ValueError as exc:
        return [], f"{manifest.name} cannot be read: {exc}"
    parts: list[_Part] = []
    for n, name in enumerate(names, 1):
        path = files / name
        if not path.is_file():
            return parts, f"{manifest.name} names {name}, which is not in {files}"
        with path.open("rb") as f:
            parts.append(_Part(path, rdb=is_rdb(f.read(6)), last=n == len(names)))
    return parts, None


async def _check_all(files: Path, binary: str) -> tuple[Checked, str]:
    """Check the append-only files ``files`` (an ``appendonlydir`` or a single file) with the
    checkers of the server ``binary``, each file the server loads in turn (see the module
    docstring): the first damaged one's ``Checked``, ``fixable`` only if it is the last file;
    or valid, when all are whole. ``RepairError`` when the files are in the other server's
    format (``server.needed_server``): its checkers cannot read them."""
    file, needs = server.needed_server(files)
    if needs is not None and needs != server_of(binary):
        raise RepairError(
            f"{file} in {files} is in the format of {needs.capitalize()} (not damage), which "
            f"{binary} cannot check: set ECHOMQ_SERVER_BIN to a {needs}-server (unset, the one "
            "the package bundles is used)"
        )
    parts, wrong = _parts(files)
    said: list[str] = []
    for part in parts:
        checked, output = await _check(part.path, binary, rdb=part.rdb)
        said.append(output)
        if not checked.valid:
            fixable = checked.fixable and part.last and checked.file is not None
            return attrs.evolve(checked, file=part.path.name, fixable=fixable), "\n".join(said)
    if wrong is not None:
        return Checked(False, fixable=False), "\n".join([*said, wrong])
    return Checked(True), "\n".join(said)


def _tail(output: str, lines: int = 4) -> str:
    return " | ".join(line.strip() for line in output.strip().splitlines()[-lines:])


def _count(kept: Path, checked: Checked) -> RepairRecord:
    damaged = kept / str(checked.file) if kept.is_dir() else kept
    with damaged.open("rb") as f:
        f.seek(checked.ok_up_to)
        cut = count_cut(f.read())
    return RepairRecord(
        "repair",
        time.time_ns() // 1_000_000,
        kept=str(kept),
        file=checked.file,
        size=checked.size,
        cut_at=checked.ok_up_to,
        cut_bytes=checked.diff,
        commands=cut.commands,
        writes=cut.writes,
    )


async def repair(data_dir: str | os.PathLike[str]) -> Repaired:
    """Repair the append-only file of the stopped server of ``data_dir`` (see the module
    docstring). ``RepairError`` when it cannot: the directory in use, no append-only file, a
    damage the checker cannot cut (not in the last file: restore an older copy instead)."""
    with _own(data_dir) as owned:
        folder = owned.path
        files = _files_of(folder)
        if files is None:
            raise RepairError(f"no append-only file in {folder} ({AOF_DIR}/ or {SINGLE_FILE})")
        binary = server.find_server_binary(folder)  # the server its files need
        checked, output = await _check_all(files, binary)
        if checked.valid:
            return Repaired(folder, None)
        if checked.file is None or not checked.fixable:
            raise RepairError(
                f"the append-only file in {files} is damaged where its checker cannot cut it "
                f"({_tail(output)}); restore an older copy with `echomq restore --data-dir "
                f"{folder} --from COPY`"
            )
        kept = _free_name(folder, "damaged-aof")
        copy = shutil.copytree if files.is_dir() else shutil.copy2
        await trio.to_thread.run_sync(copy, files, kept)
        record = await trio.to_thread.run_sync(_count, kept, checked)
        _record(folder, record)  # before the cut: see the module docstring
        damaged = files / checked.file if files.is_dir() else files
        fixed, output = await _check(damaged, binary, fix=True)
        if not fixed.truncated:
            raise RepairError(f"the checker did not cut {checked.file}: {_tail(output)}")
        again, output = await _check_all(files, binary)
        if not again.valid:
            raise RepairError(f"{files} is still damaged after the repair: {_tail(output)}")
        return Repaired(folder, record)


def _source_files(copy: str | os.PathLike[str]) -> Path:
    """The append-only files of an older copy: a data directory's ``appendonlydir/`` or
    ``appendonly.aof``, or such a directory or file itself."""
    source = Path(copy).resolve()
    if source.is_dir() and any(source.glob("*.manifest")):
        return source
    if source.is_file():
        return source
    found = _files_of(source) if source.is_dir() else None
    if found is None:
        raise RepairError(
            f"no append-only files at {source}: give a copy of a data directory, of its "
            f"{AOF_DIR}/, or of its {SINGLE_FILE}"
        )
    return found


async def restore(
    data_dir: str | os.PathLike[str], source: str | os.PathLike[str] | None
) -> RepairRecord:
    """Replace the append-only files of the stopped server of ``data_dir`` with an older copy
    from ``source`` (checked first: a damaged copy is refused), keeping the current ones; with
    ``source=None``, only record that they were replaced by hand. Either way the restore is
    recorded (see the module docstring)."""
    with _own(data_dir) as owned:
        folder = owned.path
        if source is None:
            record = RepairRecord("restore", time.time_ns() // 1_000_000)
            _record(folder, record)
            return record
        files = _source_files(source)
        checked, output = await _check_all(files, server.find_server_binary(files))
        if not checked.valid:
            raise RepairError(f"the copy at {files} is damaged itself: {_tail(output)}")
        current = _files_of(folder)
        kept = None if current is None else _free_name(folder, "replaced-aof")
        name = AOF_DIR if files.is_dir() else SINGLE_FILE
        record = RepairRecord("restore", time.time_ns() // 1_000_000,
                              kept=None if kept is None else str(kept),
                              source=str(files))  # fmt: skip
        _record(folder, record)  # before the change: see the module docstring
        staging = _free_name(folder, ".restoring")
        copy = shutil.copytree if files.is_dir() else shutil.copy2
        try:
            await trio.to_thread.run_sync(copy, files, staging)
            if current is not None and kept is not None:
                os.replace(current, kept)
            os.replace(staging, folder / name)
        finally:
            if staging.exists():
                await trio.to_thread.run_sync(_remove, staging)
        return record


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _bytes(n: int | None) -> str:
    return f"{n or 0:,} bytes"


def describe_repair(repaired: Repaired) -> str:
    """A repair in plain words, for the operator."""
    folder, r = repaired.data_dir, repaired.record
    if r is None:
        return f"the append-only file in {folder} is whole: nothing to repair"
    share = f"{100 * (r.cut_bytes or 0) / r.size:.0f}%" if r.size else "all"
    return "\n".join([
        f"repaired the append-only file in {folder}: {r.file} was damaged at byte "
        f"{r.cut_at or 0:,} of {r.size or 0:,}.",
        f"cut {_bytes(r.cut_bytes)} ({share} of that file): {r.commands or 0:,} commands in "
        f"{r.writes or 0:,} writes (a script call or a transaction is one write). Everything "
        "the server wrote after the damage is gone: jobs settled after it are pending again, "
        "and jobs added after it are lost.",
        f"the damaged files are kept in {r.kept}",
        f"recorded in {folder / REPAIRS_FILE} ({iso(r.at_ms)}): codemojex consults its audit "
        "archive before it sends a notice from before then, and does not send again one the "
        "archive records as delivered. Start the service again.",
    ])  # fmt: skip


def describe_restore(folder: Path, r: RepairRecord) -> str:
    """A restore in plain words, for the operator."""
    lines = []
    if r.source is not None:
        lines.append(f"restored the append-only files of {folder} from {r.source}")
        if r.kept is not None:
            lines.append(f"the files it replaced are kept in {r.kept}")
    else:
        lines.append(f"recorded that the server's data in {folder} was replaced by hand")
    lines.append(
        f"recorded in {folder / REPAIRS_FILE} ({iso(r.at_ms)}): codemojex consults its audit "
        "archive before it sends a notice from before then, and does not send again one the "
        "archive records as delivered."
    )
    return "\n".join(lines)
