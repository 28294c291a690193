"""The source of each packaged Lua script, as it is loaded (pure: it reads package files only).

A script's source is the public prelude (``scripts/_prelude.lua``), for the bus's own scripts
the bus's helpers (``scripts/_bus.lua``), then the script's file. ``"name"`` is
``echomq_trio/scripts/<name>.lua``; ``"package/name"`` is ``<package>/scripts/<name>.lua`` of any
importable package, dotted or not (``"codemojex/rate_take"``, ``"codemojex.notify/rate_take"``),
and gets the public prelude alone. The bus's scripts are read when this module is imported, so
a running process keeps the scripts of its version when a newer one is installed under it; an
application's scripts are read at their first use.

Key names are folded as the source is assembled: the prelude's table ``KEY`` (the mirror of
``keys.SCHEMA``) is read here, and every ``KEY.<name>`` in code becomes its suffix as a literal
(``qp .. KEY.job .. id`` runs as ``qp .. 'job:' .. id``), so naming keys costs nothing per call
(building the table on every call cost a few microseconds, the price of a small script's other
work). A name the table does not declare is a ``ValueError`` when the script is loaded, before
it ever runs. ``KEY`` is not a table at run time.

A script gets only the helpers it uses: the prelude and the bus's helpers are cut into their
top-level definitions (each ``local`` at the start of a line, to the next; any other statement
at the top level is refused when this module is imported), and a definition is kept when the
script's code, or a kept definition after it, names it (a Lua local can only use the locals
defined before it, so one pass from the last definition to the first finds them all).
The server runs a script's whole text on every call, so each helper defined and not used was a
closure made for nothing (the docs' benchmarks, "Measurements behind the design", say how
much).
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources

__all__ = ["KEY", "script_source"]

_SCRIPTS = resources.files("echomq_trio") / "scripts"
_KEY_TABLE = re.compile(r"^local KEY = \{\n(.*?)\n\}\n", re.S | re.M)
_KEY_ROW = re.compile(r"^\s*(\w+) = '([^']*)',", re.M)
_KEY_USE = re.compile(r"\bKEY\.([A-Za-z_]\w*)")
_DEFINITION = re.compile(r"^local (?:function )?([\w, ]+?) *[=(]", re.M)
# A line of the helpers that starts in column 0: a definition, the end of one, or a comment.
_TOP_LEVEL_LINE = re.compile(r"(local |end\b|\}|--)")
_WORD = re.compile(r"[A-Za-z_]\w*")


def _prelude() -> tuple[str, dict[str, str]]:
    text = (_SCRIPTS / "_prelude.lua").read_text()
    table = _KEY_TABLE.search(text)
    if table is None:
        raise RuntimeError("scripts/_prelude.lua has no `local KEY = {...}` table")
    keys = dict(_KEY_ROW.findall(table.group(1)))
    folded = "-- KEY: folded into the code of every script as it is loaded (echomq_trio.lua)\n"
    return text[: table.start()] + folded + text[table.end() :], keys


_PRELUDE, KEY = _prelude()  # KEY: the prelude's table, name -> the key's fixed part
_BUS_HELPERS = (_SCRIPTS / "_bus.lua").read_text()
# Every bus script is read now, with the Python that calls it: a process keeps the scripts of
# its version even when a newer one is installed under it while it runs.
_BUS_SCRIPTS = {
    p.name[: -len(".lua")]: p.read_text()
    for p in _SCRIPTS.iterdir()
    if p.name.endswith(".lua") and not p.name.startswith("_")
}


def code_of(text: str) -> str:
    """``text`` without its comments (a Lua comment runs from ``--`` to the end of its line; the
    bus's scripts hold no ``--`` inside a string)."""
    return "\n".join(line.partition("--")[0] for line in text.splitlines())


def _code_words(text: str) -> set[str]:
    """The words of ``text``'s code, comments left out."""
    return set(_WORD.findall(code_of(text)))


Definitions = tuple[str, list[tuple[set[str], str]]]  # the text before them; (names, text)


def _cut(helpers: str) -> Definitions:
    """``helpers`` cut into its top-level definitions (see the module's docstring)."""
    for line in helpers.splitlines():
        if line and not line[0].isspace() and not _TOP_LEVEL_LINE.match(line):
            # A statement of its own would be cut along with the definition before it.
            raise RuntimeError(f"the helpers hold a top-level line that defines nothing: {line!r}")
    cuts = [m.start() for m in _DEFINITION.finditer(helpers)]
    ends = [*cuts[1:], len(helpers)]
    definitions = []
    for start, end in zip(cuts, ends, strict=True):
        chunk = helpers[start:end]
        match = _DEFINITION.match(chunk)
        assert match is not None  # every chunk starts where the pattern matched
        definitions.append(({n.strip() for n in match.group(1).split(",")}, chunk))
    return helpers[: cuts[0]] if cuts else helpers, definitions


def _shake(helpers: Definitions, script: str) -> str:
    """The helpers' definitions that ``script`` uses, with those they use (see the module's
    docstring)."""
    head, definitions = helpers
    needed = _code_words(script)
    kept: list[str] = []
    for names, chunk in reversed(definitions):
        if names & needed:
            kept.append(chunk)
            needed |= _code_words(chunk)
    return head + "".join(reversed(kept))


_PUBLIC_HELPERS = _cut(_PRELUDE)  # an application's scripts get these
_ALL_HELPERS = _cut(_PRELUDE + "\n" + _BUS_HELPERS)  # the bus's scripts get these


def _fold(text: str, name: str) -> str:
    """``KEY.<name>`` in code (not in comments) → the quoted suffix."""

    def literal(use: re.Match[str]) -> str:
        suffix = KEY.get(use.group(1))
        if suffix is None:
            raise ValueError(
                f"script {name!r} uses KEY.{use.group(1)}, which the key schema does not declare"
            )
        return f"'{suffix}'"

    lines = []
    for line in text.splitlines(keepends=True):
        code, dashes, comment = line.partition("--")
        lines.append(_KEY_USE.sub(literal, code) + dashes + comment)
    return "".join(lines)


@lru_cache(maxsize=256)  # bounded: by the scripts on disk, and at most 256 (errors are not kept)
def script_source(name: str) -> str:
    """The source of script ``name`` as it is loaded (see the module's docstring); ``ValueError``
    for a script that does not exist or names an undeclared key."""
    package, _, base = name.rpartition("/")
    package = package or "echomq_trio"
    if package == "echomq_trio" and base in _BUS_SCRIPTS:
        body = _BUS_SCRIPTS[base]
        return _fold(_shake(_ALL_HELPERS, body) + "\n" + body, name)
    try:
        path = resources.files(package) / "scripts" / f"{base}.lua"
    except ModuleNotFoundError:
        raise ValueError(f"no script {name!r} (no package {package!r})") from None
    if not base or base.startswith("_") or not path.is_file():
        raise ValueError(f"no script {name!r} (looked for {path})")
    body = path.read_text()
    helpers = _ALL_HELPERS if package == "echomq_trio" else _PUBLIC_HELPERS
    return _fold(_shake(helpers, body) + "\n" + body, name)
