"""An embedded server's append-only file, read without I/O (pure): whether the server's log says
the file is damaged, which files it loads (its manifest), what the server's checker
(``valkey-check-aof``, ``redis-check-aof``) reported, what a cut-off part held, and the record
of a repair or restore kept in the data directory.
``echomq_trio.repair`` does the I/O and ``echomq repair`` / ``echomq restore`` run it.

Why a record: a repaired file is cut at its damage, and a restored one is an older copy, so the
server's data goes back in time: jobs settled after that point are pending again and would run
a second time. The record (``repairs.jsonl`` in the data directory: one JSON line per repair or
restore, with its time) lets an application that keeps its own ledger of finished work
(codemojex's audit archive) consult it for the work that predates the latest one.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from pathlib import Path, PurePath

import attrs
from cattrs.preconf.json import make_converter

__all__ = [
    "AOF_DIR",
    "REPAIRS_FILE",
    "SINGLE_FILE",
    "Checked",
    "Cut",
    "RepairRecord",
    "checker_name",
    "count_cut",
    "damage_message",
    "damaged_file",
    "encode_record",
    "is_rdb",
    "last_rewind_ms",
    "loaded_files",
    "other_server_message",
    "parse_check",
    "parse_records",
    "repair_command",
    "server_of",
    "snapshot_needs",
]

AOF_DIR = "appendonlydir"  # Redis 7+ and Valkey: a manifest, a base file and incremental files
SINGLE_FILE = "appendonly.aof"  # Redis 6.2: one file
REPAIRS_FILE = "repairs.jsonl"  # one line per repair or restore of the data directory

# The server's refusals that its checker can mend (Redis 6.2-8, Valkey): a format error in the
# middle, or an unexpected end when truncated tails are not loaded (the default loads them).
_DAMAGED = (
    re.compile(r"Bad file format reading the append only file (\S+?):?\s"),
    re.compile(r"Unexpected end of file reading the append only file (\S+?)\.?\s"),
)
_STARTING = "oO0OoO0OoO0Oo"  # the line each start of Redis or Valkey begins with
_CHECKER_HINT = re.compile(r"\./(?:redis|valkey)-check-aof --fix")
_ANALYZED = re.compile(
    r"AOF analyzed:(?: filename=(?P<file>[^,]+),)? size=(?P<size>\d+), ok_up_to=(?P<ok>\d+),"
    r"(?: ok_up_to_line=\d+,)? diff=(?P<diff>\d+)"
)
_TRUNCATED = re.compile(r"Successfully truncated AOF")
_NOT_LAST = re.compile(r"because it is not the last file")


def damaged_file(log_text: str) -> str | None:
    """The file a server's log says is damaged (``appendonly.aof.1.incr.aof``), or "the
    append-only file" when the log asks for the checker without naming one; ``None`` when the
    log says nothing of the kind. Only the lines of the last start count (the log is kept
    across starts)."""
    log_text = log_text[log_text.rfind(_STARTING) + 1 :]
    for pattern in _DAMAGED:
        named = [m[1] for m in pattern.finditer(log_text)]
        if named:
            return named[-1]
    return "the append-only file" if _CHECKER_HINT.search(log_text) else None


def repair_command(data_dir: str | PurePath) -> str:
    """The command that repairs the append-only file of ``data_dir``, as an operator types it."""
    return f"echomq repair --data-dir {shlex.quote(str(data_dir))}"


def damage_message(data_dir: str | PurePath, file: str) -> str:
    """One line for an operator whose server refused its damaged append-only file."""
    return (
        f"the embedded server cannot start: its append-only file is damaged ({file} in "
        f"{Path(data_dir) / AOF_DIR}). Repair it with `{repair_command(data_dir)}` (it keeps "
        "a copy of the damaged files, cuts the file at the damage and says what was cut)"
    )


def server_of(binary: str) -> str:
    """``"valkey"`` or ``"redis"``: which server ``binary`` is, by its name."""
    return "valkey" if "valkey" in PurePath(binary).name else "redis"


def checker_name(binary: str, *, rdb: bool = False) -> str:
    """The name to run the server ``binary`` by so that it is the append-only file checker (the
    snapshot checker with ``rdb``): the servers choose by the name they are run as (argv[0])."""
    return f"{server_of(binary)}-check-{'rdb' if rdb else 'aof'}"


# The first bytes of a snapshot (RDB): "REDIS0012" (Redis; Valkey up to 8), "VALKEY080" (Valkey
# 9 on). An append-only file's base is one by default (``aof-use-rdb-preamble yes``).
_RDB_MAGIC = (b"REDIS", b"VALKEY")


def is_rdb(head: bytes) -> bool:
    """Whether a file that begins with ``head`` (its first 6 bytes will do) is a snapshot."""
    return head.startswith(_RDB_MAGIC)


_SNAPSHOT_FORMAT = re.compile(rb"(REDIS|VALKEY)(\d{3,4})")
_NAMES = {"valkey": "Valkey 9 or later", "redis": "Redis 8 or later"}


def snapshot_needs(head: bytes) -> str | None:
    """The server that can load a snapshot beginning with ``head`` (its first 16 bytes will
    do): ``"valkey"`` for Valkey 9's own format (``VALKEY080`` on), which Redis cannot read;
    ``"redis"`` for Redis 8's (``REDIS0012`` on), which Valkey cannot read (it reads Redis's
    formats up to 11); ``None`` when either can, or ``head`` is no snapshot."""
    m = _SNAPSHOT_FORMAT.match(head)
    if m is None:
        return None
    if m[1] == b"VALKEY":
        return "valkey"
    return "redis" if int(m[2]) >= 12 else None


def other_server_message(data_dir: str | PurePath, file: str, needs: str, binary: str) -> str:
    """One line for an operator whose server cannot load a snapshot in another server's
    format (``needs``, as ``snapshot_needs`` says)."""
    server = f"{needs}-server"
    return (
        f"the embedded server cannot start: its append-only file ({file} in "
        f"{Path(data_dir) / AOF_DIR}) was written by {_NAMES[needs]}, in a format {binary} "
        f"cannot read (not damage: nothing to repair). Run it with a {server}: set "
        f"ECHOMQ_SERVER_BIN to one (unset, the one the package bundles is used)"
    )


def loaded_files(manifest: str) -> list[str]:
    """The files a server loads from an ``appendonlydir``, in the order it loads them, read from
    its manifest's text: the base (``type b``), then the incremental files (``type i``) in the
    manifest's order; history files (``type h``, left for deletion) are not loaded. Each line is
    ``file NAME seq N type T`` (Redis 8 adds ``startoffset``/``endoffset``); ``ValueError`` for
    a line that is not one, or a manifest that names no file to load."""
    base: list[str] = []
    incremental: list[str] = []
    for n, line in enumerate(manifest.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            words = shlex.split(line)
        except ValueError:
            words = []
        fields = dict(zip(words[::2], words[1::2], strict=False))
        kind = fields.get("type")
        if len(words) % 2 or "file" not in fields or kind not in ("b", "h", "i"):
            raise ValueError(f"line {n} of the manifest is not a file entry: {line.strip()!r}")
        (base if kind == "b" else incremental if kind == "i" else []).append(fields["file"])
    if len(base) > 1:
        raise ValueError(f"the manifest names {len(base)} base files, not one")
    if not base and not incremental:
        raise ValueError("the manifest names no file to load")
    return base + incremental


@attrs.frozen
class Checked:
    """What the checker said of an append-only file: ``valid``, or the damaged ``file`` of
    ``size`` bytes, readable up to ``ok_up_to`` and ``diff`` bytes after that (what a fix cuts).
    ``fixable`` is false when the damage is where the checker cannot cut (not in the last file);
    ``truncated`` when a ``--fix`` run cut it."""

    valid: bool
    file: str | None = None
    size: int = 0
    ok_up_to: int = 0
    diff: int = 0
    fixable: bool = True
    truncated: bool = False


def parse_check(output: str, status: int) -> Checked:
    """The checker's output (and exit status) read (Redis 6.2 to 8, Valkey)."""
    damaged = [m for m in _ANALYZED.finditer(output) if int(m["diff"]) > 0]
    fixable = not _NOT_LAST.search(output)
    truncated = bool(_TRUNCATED.search(output))
    if not damaged:
        return Checked(valid=status == 0, fixable=fixable and status == 0, truncated=truncated)
    m = damaged[-1]
    return Checked(
        valid=False,
        file=(m["file"] or SINGLE_FILE).strip(),
        size=int(m["size"]),
        ok_up_to=int(m["ok"]),
        diff=int(m["diff"]),
        fixable=fixable,
        truncated=truncated,
    )


@attrs.frozen
class Cut:
    """What a cut-off part of an append-only file held: ``commands`` (data commands: not
    ``MULTI``, ``EXEC`` or ``SELECT``), ``writes`` (a transaction, which is how a server logs a
    script call, counts once; a command on its own too) and ``unreadable`` bytes (the damage,
    and whatever could not be read as commands)."""

    commands: int = 0
    writes: int = 0
    unreadable: int = 0


_BOOKKEEPING = frozenset({b"MULTI", b"EXEC", b"SELECT"})


def count_cut(data: bytes) -> Cut:
    """Count the commands in ``data``, the part of an append-only file a repair cuts off. It
    starts with the damage (or a transaction the damage is in); past what cannot be read, the
    count picks up at the next command."""
    pos, commands, writes, unreadable, in_multi = 0, 0, 0, 0, False
    while pos < len(data):
        parsed = _command_at(data, pos)
        if parsed is None:
            resume = data.find(b"\r\n*", pos)
            skip_to = len(data) if resume < 0 else resume + 2
            unreadable += skip_to - pos
            pos = skip_to
            continue
        name, pos = parsed
        if name == b"MULTI":
            in_multi = True
            writes += 1
        elif name == b"EXEC":
            in_multi = False
        elif name not in _BOOKKEEPING:
            commands += 1
            writes += 0 if in_multi else 1
    return Cut(commands, writes, unreadable)


_ARRAY = re.compile(rb"\*(\d{1,9})\r\n")
_BULK = re.compile(rb"\$(\d{1,12})\r\n")


def _command_at(data: bytes, pos: int) -> tuple[bytes, int] | None:
    """The command (its name, upper case) at ``pos`` and where the next begins; ``None`` when
    no whole command starts there."""
    head = _ARRAY.match(data, pos)
    if head is None or int(head[1]) < 1:
        return None
    pos, name = head.end(), b""
    for n in range(int(head[1])):
        bulk = _BULK.match(data, pos)
        if bulk is None:
            return None
        start = bulk.end()
        end = start + int(bulk[1])
        if data[end : end + 2] != b"\r\n":
            return None
        if n == 0:
            name = data[start:end].upper()
        pos = end + 2
    return name, pos


@attrs.frozen
class RepairRecord:
    """One line of ``repairs.jsonl``: a ``repair`` (the file cut at its damage: ``file``, its
    ``size``, cut at ``cut_at``, ``cut_bytes`` holding ``commands`` in ``writes``) or a
    ``restore`` (the server's data replaced by an older copy from ``source``, or by hand when
    ``source`` is ``None``), at ``at_ms`` (Unix ms, this host's clock); ``kept`` is where the
    files as they were before it are kept."""

    kind: str
    at_ms: int
    kept: str | None = None
    file: str | None = None
    size: int | None = None
    cut_at: int | None = None
    cut_bytes: int | None = None
    commands: int | None = None
    writes: int | None = None
    source: str | None = None


_converter = make_converter(omit_if_default=True, forbid_extra_keys=False)


def encode_record(record: RepairRecord) -> str:
    """One line of ``repairs.jsonl`` (no line end)."""
    return _converter.dumps(record)


def parse_records(text: str) -> tuple[list[RepairRecord], int]:
    """The records of a ``repairs.jsonl`` and how many of its lines are not records (a line
    cut short by a crash while it was written, say)."""
    records, bad = [], 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            records.append(_converter.loads(line, RepairRecord))
        except Exception:  # cattrs and json raise several kinds; all mean "not a record"
            bad += 1
    return records, bad


def last_rewind_ms(records: Iterable[RepairRecord]) -> int | None:
    """The latest time the data went back (the latest repair or restore), or ``None``."""
    return max((r.at_ms for r in records), default=None)
