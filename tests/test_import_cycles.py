"""No import circle in ``codemojex``, ``echomq_trio`` or ``servicekit``: the graph of which module
imports which, built from the source (every ``import`` and ``from ... import`` anywhere in a
module, those under ``TYPE_CHECKING`` and inside functions too, nothing excluded), has no cycle.

A module imports the module it names: ``from a.b import c`` is an edge to ``a.b.c`` when that is
a module, else to ``a.b`` (the package's ``__init__``). The packages a name passes through on
the way (``a``, then ``a.b``) are not edges: Python runs them first, but a package ``__init__``
that re-exports its modules would otherwise close a circle with every module that imports a
sibling by its full name, which is how this tree spells every import."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("echomq_trio", "codemojex", "servicekit")

Graph = dict[str, set[str]]


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(tree: ast.Module, name: str, is_package: bool, known: Iterable[str]) -> set[str]:
    """The modules of ``known`` that the module ``name`` (its source parsed as ``tree``) names
    in an import, anywhere in its source."""
    modules = set(known)
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()

    def add(target: str) -> None:
        while target and target not in modules:  # ``import a.b.c`` of a name inside a.b.c
            target = target.rpartition(".")[0]
        if target:
            found.add(target)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            for alias in node.names:
                full = f"{source}.{alias.name}"
                add(full if full in modules else source)
    found.discard(name)
    return found


def import_graph(root: Path = ROOT, packages: Iterable[str] = PACKAGES) -> Graph:
    """Module -> the modules of ``packages`` it imports, from the source under ``root``."""
    paths = {module_name(p, root): p for pkg in packages for p in (root / pkg).rglob("*.py")}
    graph: Graph = {}
    for name, path in paths.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        graph[name] = imported(tree, name, path.name == "__init__.py", paths)
    return graph


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """One cycle through each strongly connected component that has one (Tarjan's algorithm,
    then a shortest path back to the component's first module), each as its modules in import
    order with the first repeated at the end; sorted, so a failure reads the same every run."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    found = []
    for component in components:
        start = min(component)
        # Breadth first from start inside the component, until an edge leads back to it.
        paths = {start: [start]}
        frontier = [start]
        cycle: list[str] | None = None
        while frontier and cycle is None:
            nxt = []
            for v in frontier:
                for w in sorted(graph.get(v, ())):
                    if w == start:
                        cycle = [*paths[v], start]
                        break
                    if w in component and w not in paths:
                        paths[w] = [*paths[v], w]
                        nxt.append(w)
                if cycle is not None:
                    break
            frontier = nxt
        assert cycle is not None
        found.append(cycle)
    return sorted(found)


def test_no_module_of_either_package_imports_itself_back() -> None:
    found = cycles(import_graph())
    assert not found, "import circles: " + "; ".join(" -> ".join(c) for c in found)


def test_telegram_stands_on_its_own_and_the_app_asks_it_for_telegram_facts() -> None:
    """``codemojex.telegram`` imports nothing else of the app, and ``chat``, ``game`` and
    ``standin`` take Telegram's facts from it, never from ``notify``'s former modules."""
    graph = import_graph()
    app = {m for m in graph if m.startswith("codemojex.") or m == "codemojex"}
    telegram = {m for m in app if m == "codemojex.telegram" or m.startswith("codemojex.telegram.")}
    outside = {(m, d) for m in telegram for d in graph[m] & app if d not in telegram}
    assert not outside, f"codemojex.telegram imports the app: {sorted(outside)}"
    for module in ("telegram", "markup", "limits", "classify"):
        assert f"codemojex.notify.{module}" not in graph  # they live in codemojex.telegram now


def test_the_service_kit_stands_below_both_packages() -> None:
    """``servicekit`` (the CLI, data directory, ASGI and human-text helpers both packages
    share) imports neither ``echomq_trio`` nor ``codemojex``, and the bus imports no app."""
    graph = import_graph()
    for module, imported in graph.items():
        if module.startswith("servicekit"):
            above = {d for d in imported if d.split(".")[0] in {"echomq_trio", "codemojex"}}
            assert not above, f"{module} imports {sorted(above)}"
        if module.startswith("echomq_trio"):
            app = {d for d in imported if d.split(".")[0] == "codemojex"}
            assert not app, f"{module} imports {sorted(app)}"
    assert {"servicekit.cli", "servicekit.datadir", "servicekit.asgi"} <= set(graph)
    for gone in (
        "echomq_trio.asgi",
        "echomq_trio.datadir",
        "echomq_trio.cli",
        "echomq_trio.humane",
    ):
        assert gone not in graph


def test_the_graph_holds_every_kind_of_import(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from pkg.a import A\n")
    (pkg / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.sub import b\nA = 1\n"
    )
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .. import c\n    import pkg.sub.d\n")
    (pkg / "c.py").write_text("from pkg import a\nfrom pkg.sub.b import f\n")
    (pkg / "sub" / "d.py").write_text("from pkg import A\n")
    assert import_graph(tmp_path, ["pkg"]) == {
        "pkg": {"pkg.a"},
        "pkg.a": {"pkg.sub.b"},
        "pkg.sub": set(),
        "pkg.sub.b": {"pkg.c", "pkg.sub.d"},
        "pkg.c": {"pkg.a", "pkg.sub.b"},
        "pkg.sub.d": {"pkg"},
    }


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
        ({"a": {"b"}, "b": {"a"}}, [["a", "b", "a"]]),
        ({"a": {"a"}}, [["a", "a"]]),
        # Two circles, one long: each named from its first module, the shortest way round.
        ({"a": {"b"}, "b": {"c", "d"}, "c": {"a"}, "d": {"c"}, "x": {"y"}, "y": {"x", "a"}},
         [["a", "b", "c", "a"], ["x", "y", "x"]]),
    ],
)  # fmt: skip
def test_cycles_are_found_and_named(graph: Graph, expected: list[list[str]]) -> None:
    assert cycles(graph) == expected
