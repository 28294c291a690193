"""``{cancellation}``: what a cancelled call means, per operation, read from each public async
function's docstring at build time (the paragraph that says "A cancelled call ..." or "Read
only"), so the table cannot drift from what the code says of itself."""

from __future__ import annotations

import importlib
import inspect
import re
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

MODULES = [
    "echomq_trio.jobs",
    "echomq_trio.lanes",
    "echomq_trio.queues",
    "echomq_trio.repeat",
    "echomq_trio.audit",
    "echomq_trio.events",
    "echomq_trio.retention",
    "echomq_trio.sequence",
]
_SAYS = re.compile(r"(A cancelled call\b.*|Read[- ]only\b.*|Cancellation\b.*)", re.S)


def cancel_rows() -> list[tuple[str, str]]:
    """(``module.function``, what a cancelled call of it means) for every public coroutine
    function of ``MODULES``; ``''`` where its docstring does not say."""
    rows = []
    for name in MODULES:
        module = importlib.import_module(name)
        for export in getattr(module, "__all__", ()):
            obj = getattr(module, export)
            if not inspect.iscoroutinefunction(obj) or obj.__module__ != name:
                continue
            said = ""
            for paragraph in inspect.getdoc(obj).split("\n\n") if obj.__doc__ else ():
                if m := _SAYS.search(paragraph):
                    said = " ".join(m[1].split())
                    break
            rows.append((f"{name.rsplit('.', 1)[1]}.{export}", said))
    return rows


class Cancellation(SphinxDirective):
    has_content = False

    def run(self) -> list[nodes.Node]:
        lines = ["| call | a cancelled call |", "|---|---|"]
        for call, said in cancel_rows():
            text = said.replace("|", "\\|") or "(its docstring does not say)"
            lines.append(f"| `{call}` | {text} |")
        return self.parse_text_to_nodes("\n".join(lines))


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("cancellation", Cancellation)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
