"""``{apimodule} NAME``: the reference page body of one public module, from its ``__all__``.

Each name of ``__all__`` is documented once, where it is defined: a module documents the names
it defines (and those it re-exports from private modules); a name it re-exports from another
public module (the package ``echomq_trio`` re-exports ``Bus`` from ``echomq_trio.bus``) is
listed with a link to that page instead, so there is one description of each object and every
cross-reference has one target. Computed at build time, so a new name in ``__all__`` is on its
page without an edit (``tests/test_docs.py`` checks it)."""

from __future__ import annotations

import importlib
import types
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective


def _public(module: str) -> bool:
    return not any(part.startswith("_") for part in module.split("."))


def _attr_comments(name: str) -> dict[str, list[str]]:
    """The ``#:`` comments of ``name``'s module-level names."""
    from sphinx.pycode import ModuleAnalyzer

    try:
        docs = ModuleAnalyzer.for_module(name).find_attr_docs()
    except Exception:  # no source (never here: the tree is read from its files)
        return {}
    return {attr: list(lines) for (scope, attr), lines in docs.items() if scope == ""}


def _is_code(obj: object) -> bool:
    return isinstance(obj, type) or (callable(obj) and hasattr(obj, "__code__"))


def split_exports(name: str) -> tuple[list[str], list[tuple[str, str]]]:
    """``name``'s exports: (documented here, [(name, public module documenting it)]); a
    submodule's module is ``''``."""
    module = importlib.import_module(name)
    own: list[str] = []
    elsewhere: list[tuple[str, str]] = []
    for export in getattr(module, "__all__", ()):  # a program (echomq_trio.demo) has none
        obj = getattr(module, export)
        if isinstance(obj, types.ModuleType):  # a submodule: its own page
            elsewhere.append((export, ""))
            continue
        home = getattr(obj, "__module__", None)
        if (
            isinstance(home, str)
            and home != name
            and _public(home)
            and home.startswith("echomq_trio")
            and export in getattr(importlib.import_module(home), "__all__", ())
            and getattr(obj, "__name__", export) == export
        ):
            elsewhere.append((export, home))
        else:
            own.append(export)
    return own, elsewhere


class ApiModule(SphinxDirective):
    required_arguments = 1
    has_content = False

    def run(self) -> list[nodes.Node]:
        name = self.arguments[0]
        own, elsewhere = split_exports(name)
        # The page is MyST Markdown: autodoc's output is reStructuredText, so it goes in an
        # eval-rst block (MyST would read it as Markdown otherwise).
        lines = ["```{eval-rst}", f".. automodule:: {name}"]
        module = importlib.import_module(name)
        code = [n for n in own if _is_code(getattr(module, n))]
        data = [n for n in own if n not in code]
        if code:
            lines += [f"   :members: {', '.join(code)}", "   :undoc-members:"]
        else:
            lines += ["   :no-members:"]
        # Constants and type aliases: autodoc's module members leave out data it cannot place
        # (and would show a builtin type's docstring for it), so each is declared here with its
        # ``#:`` comment where it has one. Values are not shown: some are long tables (keys.SCHEMA
        # is drawn in the design pages).
        comments = _attr_comments(name)
        for n in data:
            lines += ["", f".. py:data:: {n}", f"   :module: {name}", ""]
            lines += [f"   {line}" for line in comments.get(n, [])]
        if elsewhere:
            lines += ["", ".. rubric:: Also exported here", ""]
            lines += [
                f"- :py:mod:`{name}.{n}`"
                if not home
                else f"- :py:obj:`{n} <{home}.{n}>` (from :py:mod:`{home}`)"
                for n, home in elsewhere
            ]
        lines += ["```"]
        return self.parse_text_to_nodes("\n".join(lines), allow_section_headings=True)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("apimodule", ApiModule)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
