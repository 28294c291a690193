"""The bus's scripts as one function library (pure): loaded once per server (``FUNCTION LOAD``),
then run by ``FCALL``.

Why: a script run by ``EVALSHA`` runs its whole text on every call, so every helper it uses is
made afresh each time (a closure per ``local function``), a few microseconds of the server's time
per call whatever the script does. A library's top level runs once, when it is loaded: its
helpers are made then, and a call runs the script's own body alone.

The library (``library()``, built at its first use): a ``#!lua name=echomq_<hash>`` line; the
prelude's and the bus's helpers, all of them, once; then one function per script of the package
(``echomq_trio/scripts``), ``echomq_<hash>_<script>``, whose body is the script's file as
``lua.script_source`` folds it, called with the script's ``KEYS`` and ``ARGV``. ``<hash>`` is the
first 12 hex digits of the library's text, so two versions of the bus on one server keep
libraries of their own (a function's name is the server's, across libraries).

Per-run state: a helper may keep state for one run of a script (the queue settings read once,
``kept``; the lane keys made, ``lane_keys_seen``). In a library such a top-level ``local`` would
outlive the call, so each function sets every top-level definition that is neither a function nor
an UPPERCASE constant (a number or a string) afresh before its body, as the script's own run did.

Flags: a script whose every command is a read gets ``no-writes``, so it runs where writes are
refused (the memory ceiling, a disk that failed, a replica), as ``EVALSHA`` runs it; the others
get none: while the server refuses writes, such a function is refused whole before it runs
(``EVALSHA`` ran it up to its first write, which was refused). A script is a read when every
command-like word it holds (an UPPERCASE string) is one of ``READS`` or of the words commands take
(``WORDS``; a helper may name its command by a variable, which holds one of those words), and no
command is named by the caller (``ARGV``); anything else counts as a write.
"""

from __future__ import annotations

import functools
import hashlib
import re

import attrs

from echomq_trio import lua

__all__ = ["READS", "WORDS", "Library", "build_library", "is_read_only", "library"]

# Commands that read alone (a no-writes function may call them).
_READS = """EXISTS GET MGET STRLEN TTL PTTL TYPE HGET HMGET HGETALL HEXISTS HLEN HKEYS HVALS HSCAN
ZCARD ZCOUNT ZSCORE ZMSCORE ZRANGE ZRANGEBYSCORE ZREVRANGE ZREVRANGEBYSCORE ZRANK ZREVRANK
ZRANGEBYLEX ZSCAN LLEN LRANGE LINDEX SCARD SISMEMBER SMISMEMBER SMEMBERS SSCAN XLEN XRANGE
XREVRANGE XINFO XPENDING TIME SCAN"""
READS = frozenset(_READS.split())
# Words that commands take (options), not commands.
_WORDS = "WITHSCORES WITHSCORE LIMIT BYSCORE BYLEX REV COUNT MATCH IDLE STREAM GROUPS FULL"
WORDS = frozenset(_WORDS.split())
_CALL = re.compile(r"redis\.p?call\(\s*([^,)]*)")
_LITERAL = re.compile(r"'([A-Z][A-Z_]*)'")
_CONSTANT = re.compile(r"local [A-Z][A-Z0-9_]* = (-?\d+|'[^'\n]*')")


def is_read_only(source: str) -> bool:
    """Whether ``source`` (a script as it is loaded) only reads (see the module's docstring)."""
    code = lua.code_of(source)
    if any("ARGV" in called or "KEYS" in called for called in _CALL.findall(code)):
        return False  # a command named by the caller: may be a write
    return all(w in READS or w in WORDS for w in _LITERAL.findall(code))


@attrs.frozen
class Library:
    name: str
    source: str
    functions: dict[str, str]  # script -> its function's name


def _state(definitions: list[tuple[set[str], str]]) -> str:
    """The statements that set the helpers' per-run state afresh (see the module's docstring)."""
    resets = []
    for _, chunk in definitions:
        statement = lua.code_of(chunk).strip()
        if statement.startswith("local function ") or _CONSTANT.fullmatch(statement):
            continue
        if "\n" in statement:
            raise RuntimeError(f"per-run state must be defined on one line: {statement!r}")
        resets.append(statement.removeprefix("local "))
    return "\n".join(resets)


def build_library(scripts: dict[str, str]) -> Library:
    """The library of ``scripts`` (name -> the script's file), with the prelude's and the bus's
    helpers (see the module's docstring)."""
    head, definitions = lua._ALL_HELPERS
    helpers = lua._fold(head + "".join(chunk for _, chunk in definitions), "the helpers")
    state = _state(definitions)
    bodies = {name: lua._fold(scripts[name], name) for name in sorted(scripts)}
    digest = hashlib.sha1((helpers + "".join(bodies.values())).encode()).hexdigest()[:12]
    prefix = f"echomq_{digest}"
    functions = {name: f"{prefix}_{name}" for name in bodies}
    parts = [f"#!lua name={prefix}\n", helpers, "\n"]
    for name, body in bodies.items():
        flags = "{'no-writes'}" if is_read_only(lua.script_source(name)) else "{}"
        parts.append(
            f"redis.register_function{{function_name = '{functions[name]}', flags = {flags}, "
            f"callback = function(KEYS, ARGV)\n{state}\n{body}\nend}}\n"
        )
    return Library(prefix, "".join(parts), functions)


@functools.cache
def library() -> Library:
    """The bus's library, built at its first use (about 40 ms: a process that never runs a
    script by the bus's own transport, such as one on glide's, never builds it)."""
    return build_library(lua._BUS_SCRIPTS)
