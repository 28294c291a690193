"""Every Python example of the docs runs, so none can rot: each ```python block of
``docs/**/*.md`` and of the README is a test.

A block runs as a program of its own (``python -c``, from the repository's root) and must exit 0;
``<!-- prints: TEXT -->`` lines just before it name text its output must hold. A block that is
a piece of a program (it awaits inside a nursery the page does not show) says so just before
it, ``<!-- fragment: why -->``: it is compiled (top-level ``await`` allowed), and every name it
imports from the packages, and every attribute it reads of a module it imports, must exist. No
block is skipped silently: a new one is run unless it says it is a fragment.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("echomq_trio", "codemojex", "servicekit")
RUN_TIMEOUT_S = 120

_FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
_COMMENT = re.compile(r"<!--\s*(fragment|prints):\s*(.*?)\s*-->")


@attrs.frozen
class Example:
    path: str  # relative to the root
    line: int
    code: str
    fragment: bool
    prints: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"


def doc_files() -> list[Path]:
    docs = [p for p in sorted((ROOT / "docs").rglob("*.md")) if "_build" not in p.parts]
    return [ROOT / "README.md", *docs]


def examples_in(path: Path) -> list[Example]:
    """The ```python blocks of one Markdown file, each with the comments just before it."""
    text = path.read_text()
    found = []
    for match in _FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").split("\n")
        comments = []
        while before and _COMMENT.search(before[-1]):
            comments.append(_COMMENT.search(before[-1]))
            before.pop()
        fragment = any(c and c[1] == "fragment" for c in comments)
        prints = tuple(c[2] for c in reversed(comments) if c and c[1] == "prints")
        line = text.count("\n", 0, match.start()) + 1
        rel = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
        found.append(Example(rel, line, match[1], fragment, prints))
    return found


def all_examples() -> list[Example]:
    return [e for path in doc_files() for e in examples_in(path)]


EXAMPLES = all_examples()


def test_the_docs_have_examples_to_run() -> None:
    """The collector finds the examples (a change of fence syntax would make every test below
    vanish: this one fails instead)."""
    assert sum(not e.fragment for e in EXAMPLES) >= 5
    assert any(e.path == "README.md" for e in EXAMPLES)


def test_the_collector_reads_the_markers(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "text\n\n<!-- prints: a -->\n<!-- prints: b -->\n```python\nprint('a')\n```\n\n"
        "<!-- fragment: a piece -->\n```python\nawait x()\n```\n```python\npass\n```\n"
    )
    runnable, piece, plain = examples_in(page)
    assert (runnable.prints, runnable.fragment, runnable.line) == (("a", "b"), False, 5)
    assert piece.fragment and piece.code == "await x()\n"
    assert not plain.fragment and plain.prints == ()


def _imports_and_reads(tree: ast.AST) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """(module, name) imported from the packages, and local name -> module for modules."""
    names: list[tuple[str, str]] = []
    modules: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGES):
            assert node.module is not None
            names += [(node.module, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith(PACKAGES):
                    if a.asname:  # import echomq_trio.jobs as j: j is that module
                        modules[a.asname] = a.name
                    else:  # import echomq_trio.jobs binds the package
                        modules[a.name.split(".")[0]] = a.name.split(".")[0]
    return names, modules


def check_fragment(code: str) -> None:
    """Compile ``code`` and check the names it takes from the packages."""
    tree = compile(code, "<example>", "exec", ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    imported, modules = _imports_and_reads(tree)
    for module, name in imported:
        mod = importlib.import_module(module)
        if not hasattr(mod, name):
            importlib.import_module(f"{module}.{name}")  # a submodule; ImportError if not
        else:
            value = getattr(mod, name)
            if isinstance(value, type(sys)):
                modules[name] = value.__name__
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
        ):
            mod = importlib.import_module(modules[node.value.id])
            assert hasattr(mod, node.attr), f"{modules[node.value.id]} has no {node.attr}"


def test_a_fragment_naming_what_is_not_there_fails() -> None:
    check_fragment("from echomq_trio import jobs\nawait jobs.enqueue(bus, 'q', 'x')\n")
    with pytest.raises(AssertionError, match="has no enqueue_twice"):
        check_fragment("from echomq_trio import jobs\nawait jobs.enqueue_twice(bus)\n")
    with pytest.raises(ImportError):
        check_fragment("from echomq_trio.jobs import no_such_name\n")


@pytest.mark.parametrize(
    "example", [e for e in EXAMPLES if e.fragment], ids=lambda e: e.id
)  # fmt: skip
def test_fragment(example: Example) -> None:
    check_fragment(example.code)


@pytest.mark.server
@pytest.mark.parametrize(
    "example", [e for e in EXAMPLES if not e.fragment], ids=lambda e: e.id
)  # fmt: skip
def test_example_runs(example: Example) -> None:
    done = subprocess.run(
        [sys.executable, "-c", example.code], capture_output=True, text=True,
        timeout=RUN_TIMEOUT_S, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, f"{example.id} failed:\n{done.stderr[-4000:]}"
    for want in example.prints:
        assert want in done.stdout, f"{example.id} did not print {want!r}:\n{done.stdout}"
