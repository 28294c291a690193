"""``{keyschema}``: the keys of a queue, from ``echomq_trio.keys.SCHEMA`` at build time (the
schema the Lua prelude mirrors line for line), so the table is the code's."""

from __future__ import annotations

import re
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective


def _accessor(name: str, pattern: str) -> str:
    """How ``bus.keys(q)`` reaches the key: ``job(id)`` for ``job:<id>``, else the name."""
    variable = re.search(r"<(\w+)>", pattern)
    return f"{name}({variable[1]})" if variable else name


def schema_rows() -> list[tuple[str, str, str, str]]:
    from echomq_trio.keys import SCHEMA

    return [(_accessor(k.name, k.pattern), k.pattern, k.type, k.meaning) for k in SCHEMA]


class KeySchema(SphinxDirective):
    has_content = False

    def run(self) -> list[nodes.Node]:
        def cell(text: str) -> str:
            return text.replace("|", "\\|")

        lines = ["| name (`bus.keys(q).…`) | suffix | type | holds |", "|---|---|---|---|"]
        lines += [f"| `{a}` | `{p}` | {t} | {cell(m)} |" for a, p, t, m in schema_rows()]
        return self.parse_text_to_nodes("\n".join(lines))


def setup(app: Sphinx) -> dict[str, Any]:
    from pygments.lexers.special import TextLexer

    app.add_directive("keyschema", KeySchema)
    # echomq_trio/scripts/README.md (included in the site) draws its diagram in a mermaid block,
    # which GitHub renders; here it is shown as text beside the Graphviz drawing.
    app.add_lexer("mermaid", TextLexer)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
