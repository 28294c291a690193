"""``{statediagram}``: the job lifecycle drawn from ``echomq_trio.states`` (its ``EDGES`` and
``EXPIRES``) by Graphviz ``dot`` at build time, so the picture is the table the scripts are
checked against, never a copy of it. One arrow per pair of places, labelled with the scripts
that move a job along it (what ``states.mermaid()`` draws, in DOT)."""

from __future__ import annotations

from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.ext.graphviz import graphviz
from sphinx.util.docutils import SphinxDirective

_NO_ROW = 'fixedsize=true, width=0.85, fontsize=11, fillcolor="#f4f4f4", color="#999999"'


def job_dot() -> str:
    """The job state machine in DOT."""
    from echomq_trio.states import EXPIRES, Place, arrows

    def ident(p: Place, end: bool = False) -> str:
        if p is Place.NONE:  # drawn twice: where a job comes from, and where it ends
            return "gone" if end else "new"
        return p.name.lower()

    pairs = arrows()
    lines = [
        "digraph jobs {",
        '  graph [rankdir=TB, bgcolor="transparent", nodesep=0.25, ranksep=0.5];',
        '  node [shape=box, style="rounded,filled", fillcolor="#eef3fb", color="#5b7bb5",'
        ' fontname="Helvetica", fontsize=13, margin="0.15,0.06"];',
        '  edge [fontname="Helvetica", fontsize=11, color="#66708a", fontcolor="#2b3245"];',
        f'  new [label="(no row)", shape=circle, {_NO_ROW}];',
        f'  gone [label="(no row)", shape=doublecircle, {_NO_ROW}];',
        "  { rank=source; new; }",
        "  { rank=sink; gone; }",
    ]
    lines += [f'  {ident(p)} [label="{p.value}"];' for p in Place if p is not Place.NONE]
    for (a, b), names in pairs.items():
        label = "\\n".join(names)
        lines.append(f'  {ident(a)} -> {ident(b, end=True)} [label="{label}"];')
    for p, why in EXPIRES.items():
        lines.append(f'  {ident(p)} -> gone [label="expires\\n({why})", style=dashed];')
    lines.append("}")
    return "\n".join(lines)


class StateDiagram(SphinxDirective):
    has_content = False

    def run(self) -> list[nodes.Node]:
        node = graphviz()
        node["code"] = job_dot()
        node["options"] = {"docname": self.env.docname}
        node["alt"] = "The job state machine: places and the scripts that move a job"
        node["align"] = "center"
        return [node]


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("statediagram", StateDiagram)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
