"""The scripts against the written rules: the Lua prelude's key schema is ``keys.SCHEMA`` line for
line, scripts reach only declared keys, each header's transition arrow is the one
``echomq_trio.states`` gives (the table the README is written from), scripts answer the words
Python parses, and application scripts get the public prelude alone (by a plain or a dotted
package name)."""

from __future__ import annotations

import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from echomq_trio import Bus, ids, lua, protocol, states
from echomq_trio.keys import SCHEMA, queue_keys
from echomq_trio.results import Counts, Outcome, Registered
from echomq_trio.wire import script_source

pytestmark = pytest.mark.cluster

SCRIPTS = Path(__file__).resolve().parents[2] / "echomq_trio" / "scripts"
PRELUDE = (SCRIPTS / "_prelude.lua").read_text()
BUS_HELPERS = (SCRIPTS / "_bus.lua").read_text()
BUS_SCRIPTS = sorted(p.stem for p in SCRIPTS.glob("[a-z]*.lua"))
APP_SCRIPTS = sorted(
    p for p in (SCRIPTS.parents[1] / "codemojex").rglob("scripts/*.lua") if p.is_file()
)


def _code(text: str) -> str:
    """Lua text without its comments."""
    return re.sub(r"--[^\n]*", "", text)


# --- the key schema ------------------------------------------------------------------------------


def _lua_schema() -> list[tuple[str, str, str, str]]:
    body = PRELUDE.split("local KEY = {", 1)[1].split("\n}", 1)[0]
    rows = re.findall(r"^  (\w+) = '([^']*)',\s*-- (\w+) (\S+)$", body, re.M)
    assert len(rows) == len([line for line in body.splitlines() if line.strip()]), body
    return rows


def test_the_prelude_mirrors_the_schema_line_for_line() -> None:
    assert _lua_schema() == [(s.name, s.stem, s.type, s.pattern) for s in SCHEMA]
    assert {s.name: s.stem for s in SCHEMA} == lua.KEY  # what the loader folds in


def test_every_schema_entry_is_a_member_of_queue_keys() -> None:
    k = queue_keys("q")
    job = ids.generate("JOB")
    for spec in SCHEMA:
        if spec.variable:
            key = getattr(k, spec.name)({"job": job, "flow": job}.get(spec.name, "x:1"))
        else:
            key = getattr(k, spec.name)
        assert key.startswith("emq:{q}:" + spec.stem), spec
        assert k.spec_of(key) == spec
    assert len({s.name for s in SCHEMA}) == len({s.pattern for s in SCHEMA}) == len(SCHEMA)


@pytest.mark.parametrize("name", [*BUS_SCRIPTS, "_bus"])
def test_bus_scripts_reach_only_declared_keys(name: str) -> None:
    code = _code((SCRIPTS / f"{name}.lua").read_text())
    declared = {s.name for s in SCHEMA}
    used = set(re.findall(r"\bKEY\.([A-Za-z_]\w*)", code))
    assert used <= declared, f"{name}.lua uses undeclared keys {sorted(used - declared)}"
    # Every key is the queue prefix and a KEY entry: nothing else is joined to the prefix, no
    # key is derived from KEYS[n], and no suffix or key is spelled as a literal.
    assert not re.search(r"\bqp\s*\.\.(?!\s*KEY\.)", code), f"{name}.lua builds a key by hand"
    assert not re.search(r"\.\.\s*'[a-z_]+:?'", code), f"{name}.lua builds a key by hand"
    assert not re.search(r"(ARGV\[1\]|KEYS\[\d\])\s*\.\.", code), f"{name}.lua derives a key"
    assert "emq:" not in code
    if name not in ("_bus", "audit_ack"):
        # ARGV[1] is the queue prefix, named qp once at the top.
        assert code.lstrip().startswith("local qp = ARGV[1]\n"), name
        assert code.count("ARGV[1]") == 1, name


def test_keys_are_folded_in_as_literals_when_a_script_is_loaded() -> None:
    for name in BUS_SCRIPTS:
        source = script_source(name)
        code = _code(source)
        # Neither the table nor a use of it is left to run.
        assert not re.search(r"\bKEY\b", code), name
        for spec in SCHEMA:
            if re.search(rf"\bKEY\.{spec.name}\b", _code((SCRIPTS / f"{name}.lua").read_text())):
                assert f"qp .. '{spec.stem}'" in code, (name, spec.name)


@pytest.fixture
def app_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An importable package ``emqapp.notify`` whose ``scripts/`` folder a test fills."""
    folder = tmp_path / "emqapp" / "notify" / "scripts"
    folder.mkdir(parents=True)
    (tmp_path / "emqapp" / "__init__.py").write_text("")
    (tmp_path / "emqapp" / "notify" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        yield folder
    finally:
        script_source.cache_clear()
        for mod in [m for m in sys.modules if m.startswith("emqapp")]:
            del sys.modules[mod]


def test_an_undeclared_key_fails_the_load(app_package: Path) -> None:
    (app_package / "bad.lua").write_text("-- KEY.nope in a comment is fine\nreturn KEY.gactive\n")
    with pytest.raises(ValueError, match=r"uses KEY\.gactive, which the key schema does not"):
        script_source("emqapp.notify/bad")


async def test_an_app_script_addresses_the_queue_s_keys(bus: Bus, app_package: Path) -> None:
    (app_package / "keys.lua").write_text(
        "local qp = ARGV[1]\n"
        "return {qp .. KEY.pending, qp .. KEY.job .. 'x', qp .. KEY.app .. 'y'}\n"
    )
    source = script_source("emqapp.notify/keys")
    assert await bus.transport.command("EVAL", source, "0", "emq:{t}:") == [
        b"emq:{t}:pending", b"emq:{t}:job:x", b"emq:{t}:app:y",
    ]  # fmt: skip


# --- the state machine (echomq_trio.states; tests/echomq_trio/test_states.py) -------------------


def _header(name: str) -> str:
    lines = re.findall(r"^-- transition: (.*)$", (SCRIPTS / f"{name}.lua").read_text(), re.M)
    assert len(lines) == 1, f"{name}.lua needs exactly one '-- transition:' header line"
    return lines[0]


def test_the_table_lists_every_script_once() -> None:
    assert sorted(states.SCRIPTS) == BUS_SCRIPTS
    assert {e.script for e in states.EDGES} <= set(BUS_SCRIPTS)


@pytest.mark.parametrize("name", BUS_SCRIPTS)
def test_each_header_arrow_is_the_table_s(name: str) -> None:
    assert _header(name) == states.arrow(name)


@pytest.mark.parametrize("name", BUS_SCRIPTS)
def test_each_header_states_its_cost_bounded_by_its_batch(name: str) -> None:
    """No script walks every lane, job, repeat or dead job (the server runs one script at a
    time): each header says its cost, O(1), O(log n) or O(the batch it was asked for); only the
    one-time bookkeeping of a queue from an earlier version walks its lanes."""
    lines = re.findall(r"^-- cost: (.*)$", (SCRIPTS / f"{name}.lua").read_text(), re.M)
    assert len(lines) == 1, f"{name}.lua needs exactly one '-- cost:' header line"
    assert lines[0].startswith("O("), lines[0]
    if name != "count_lanes":
        assert not re.search(r"\blanes\b|\bjobs\)|every", lines[0]), (name, lines[0])


def test_the_states_table_names_declared_keys_and_agrees_with_the_protocol() -> None:
    rows = [line.split(" | ") for line in states.readme_sections()["states"][2:]]
    assert [row[0].strip("|` ") for row in rows] == [p.value for p in states.Place]
    patterns = {s.pattern for s in SCHEMA}
    for where in (row[1] for row in rows):
        for key in re.findall(r"`([^`]+)`", where):
            assert key in patterns, key
    k = queue_keys("q")
    for state in (s for s in states.JobState if s.waits_in):  # completed: its row alone
        suffix = protocol.state_set(k, state).removeprefix(k.prefix)
        assert (
            states.JobState(state).waits_in
            == suffix
            == next(s.stem for s in SCHEMA if s.name == protocol.STATE_SETS[state])
        )
    assert set(protocol.STATE_SETS) == {str(s) for s in states.JobState} - {"completed"}


def _words(name: str) -> set[str]:
    return set(states.SCRIPTS[name].answers)


def _answered(name: str) -> str:
    # The words a script can return: its own text, and for scripts that check a lease, held().
    text = (SCRIPTS / f"{name}.lua").read_text()
    return text + BUS_HELPERS if "held(" in text else text


@pytest.mark.parametrize("name", BUS_SCRIPTS)
def test_scripts_answer_the_words_python_parses(name: str) -> None:
    words = _words(name)
    code = _code(_answered(name))
    for word in words:
        assert f"'{word}'" in code, f"{name}.lua never answers {word!r}"
    if name in ("enqueue", "lane_enqueue", "schedule", "ack", "retry", "defer", "replay"):
        assert words and all(Outcome(w) for w in words)
    parsers = {
        "register": lambda w: protocol.register_reply([w, 1])[0],
        "unregister": protocol.unregister_reply,
        "lane_resume": protocol.lane_resume_reply,
    }
    if name in parsers:
        assert {str(parsers[name](w.encode())) for w in words} == (
            {"registered", "exists", "replaced"} if name == "register" else {"True", "False"}
        )


def test_every_outcome_is_some_script_s_answer() -> None:
    answered = set().union(*(_words(n) for n in BUS_SCRIPTS))
    assert {o.value for o in Outcome} <= answered
    assert {r.value for r in Registered} <= answered


# --- preludes and names --------------------------------------------------------------------------


def test_the_id_epoch_is_one_fact() -> None:
    (epoch,) = re.findall(r"^local ID_EPOCH_MS = (\d+)$", PRELUDE, re.M)
    assert int(epoch) == ids.EPOCH_MS
    board = (SCRIPTS.parents[1] / "codemojex" / "game" / "scripts" / "board_record.lua").read_text()
    assert "ID_EPOCH_MS" in board and "1704067200000" not in board and "'TIME'" not in board


def test_bus_scripts_get_the_bus_helpers_and_app_scripts_only_the_public_prelude() -> None:
    assert "local function held(" in script_source("ack")
    assert "local function now_ms(" in script_source("ack")
    for path in APP_SCRIPTS:
        name = f"codemojex/{path.stem}"
        if path.parent.parent.name != "codemojex":  # moved into a sub-package
            name = f"codemojex.{path.parent.parent.name}/{path.stem}"
        source = script_source(name)
        assert "local function held(" not in source, name
        assert ("local function now_ms(" in source) == ("now_ms(" in path.read_text()), name
        assert "local function now_ms" not in path.read_text(), f"{name} re-implements now_ms"
    assert APP_SCRIPTS


HELPER_NAMES = re.findall(r"^local (?:function )?(\w+)", PRELUDE + BUS_HELPERS, re.M)


def _bare_code(text: str) -> str:
    """``text`` without its comments, string literals, fields (``t.name``) and the keys of its
    table constructors (``{name = ...``): what is left names only variables."""
    code = "\n".join(line.partition("--")[0] for line in text.splitlines())
    code = re.sub(r"'[^'\n]*'|\"[^\"\n]*\"", "''", code)
    code = re.sub(r"\.\w+", "", code)
    return re.sub(r"([{,]\s*)\w+(\s*=[^=])", r"\1\2", code)


@pytest.mark.parametrize("name", BUS_SCRIPTS)
def test_a_script_defines_every_helper_it_names(name: str) -> None:
    source = _bare_code(script_source(name))
    defined = set(re.findall(r"^local (?:function )?(\w+)", source, re.M))
    named = {h for h in HELPER_NAMES if re.search(rf"\b{h}\b", source)}
    assert named <= defined, f"{name} names {named - defined} without defining them"
    assert len(defined & set(HELPER_NAMES)) < len(set(HELPER_NAMES))  # and not every helper


def test_a_helper_needed_only_by_another_is_kept_and_an_unused_one_is_not() -> None:
    enqueue, ack = script_source("enqueue"), script_source("ack")
    assert "local function held(" not in enqueue and "local function lane_done(" not in enqueue
    ack_body = (SCRIPTS / "ack.lua").read_text()
    assert "lane_emptied(" in ack_body and "lane_done(" in ack_body
    assert "ring_add(" not in ack_body and "lane_forget(" not in ack_body  # inside those two
    assert "local function ring_add(" in ack and "local function lane_ready(" in ack
    assert "local function lane_forget(" in ack


def test_a_top_level_statement_in_the_helpers_is_refused() -> None:
    with pytest.raises(RuntimeError, match="defines nothing"):
        lua._cut("local function a() return 1 end\nredis.setresp(3)\n")


def test_a_dotted_package_names_its_scripts(app_package: Path) -> None:
    (app_package / "take.lua").write_text("return now_ms()\n")
    source = script_source("emqapp.notify/take")
    assert "local function now_ms(" in source and source.endswith("return now_ms()\n")
    assert "local function held(" not in source
    for missing in ("emqapp.notify/none", "emqapp.nothing/take", "emqapp.notify/_prelude"):
        with pytest.raises(ValueError, match="no script"):
            script_source(missing)


async def test_an_app_script_runs_with_the_public_prelude(bus: Bus) -> None:
    # board_record packs the time since the id epoch (now_ms() - ID_EPOCH_MS) into the score.
    from codemojex import game
    from codemojex.game import board

    room = (await game.create_room(bus, -8_000_000 - ids.node_id(), "Prelude Room")).id
    rnd = (await game.start_round(bus, room, starts_in_ms=0)).id
    before = await bus.transport.server_time_ms()
    assert (await board.record(bus, room, rnd, ids.generate("USR"), 70)).best == 70
    after = await bus.transport.server_time_ms()
    key = board.round_board(room, rnd).key
    (_, score), *_ = (await bus.transport.command("ZRANGE", key, "0", "0",
                                             "WITHSCORES")).items()  # fmt: skip
    reached = ids.EPOCH_MS + 10**13 - 1 - round(float(score)) % 10**13
    assert before <= reached <= after
    await game.end_round(bus, room)


def test_bus_scripts_are_read_at_import_so_a_running_process_keeps_its_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A newer version installed under a running process must not mix its scripts with the
    process's Python: the bus's scripts are read when ``echomq_trio.lua`` is imported."""
    import importlib

    copy = tmp_path / "echomq_trio"
    shutil.copytree(Path(lua.__file__).parent, copy)
    monkeypatch.syspath_prepend(str(tmp_path))
    saved = {m: sys.modules.pop(m) for m in list(sys.modules) if m.startswith("echomq_trio")}
    try:
        fresh = importlib.import_module("echomq_trio.lua")
        before = fresh.script_source("counts")
        (copy / "scripts" / "counts.lua").write_text("return 'a newer version'\n")
        fresh.script_source.cache_clear()
        assert fresh.script_source("counts") == before
    finally:
        for m in [m for m in sys.modules if m.startswith("echomq_trio")]:
            del sys.modules[m]
        sys.modules.update(saved)


# --- replies decoded by name ---------------------------------------------------------------------


def _header_fields(name: str) -> dict[str, tuple[str, ...]]:
    """A script's ``-- fields:`` and ``-- fields of each <item>:`` lines (a line may go on in
    lines indented under it), by ``REPLY_FIELDS`` key."""
    out = {}
    lines = (SCRIPTS / f"{name}.lua").read_text().splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^-- fields(?: of each (\w+))?: (.*)$", line)
        if not m:
            continue
        text = m[2]
        for more in lines[i + 1 :]:
            if not re.match(r"^--\s{8,}\S", more):
                break
            text += " " + more[2:].strip()
        key = f"{name}/{m[1]}" if m[1] else name
        assert key not in out, f"{name}.lua lists {key}'s fields twice"
        out[key] = tuple(f.strip() for f in text.split(",") if f.strip())
    return out


def test_each_reply_is_decoded_by_the_names_its_header_lists() -> None:
    """A script answering a fixed shape lists its fields in order (``-- fields:``, and for a
    list's items ``-- fields of each <item>:``); the Python decoder reads them by those names
    (``protocol.REPLY_FIELDS``), so a field added, dropped or moved on one side only fails
    here."""
    headers: dict[str, tuple[str, ...]] = {}
    for name in BUS_SCRIPTS:
        headers |= _header_fields(name)
    assert headers == protocol.REPLY_FIELDS
    with pytest.raises(ValueError, match="inspect/job answered 6 fields, expected 13"):
        protocol.inspect_reply([[b"JOB0000000000x", b"dead", b"1", b"", b"", b""]])
    with pytest.raises(ValueError, match="fire/wanted answered 1 fields, not items of 4"):
        protocol.fire_reply([1, -1, 5, 6])
    with pytest.raises(ValueError, match="register answered 3 fields, expected 2"):
        protocol.register_reply([b"exists", 5, 6])
    with pytest.raises(ValueError, match="claim/job answered 4 fields, not items of 6"):
        protocol.claim_reply([9, b"JOB0000000000x", b"p", 1, 1], "q")
    assert protocol.reap_reply([1, 2, 0]).next_from is None  # the optional last field


def test_the_counts_fields_are_the_counts_record_s() -> None:
    assert protocol.REPLY_FIELDS["counts"] == tuple(f.name for f in attrs.fields(Counts))
