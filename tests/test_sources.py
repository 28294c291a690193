"""Every module of both packages imports on the Python running the tests (CI runs the fast tier
on each Python the package claims, ``tools/pythons.py``), and no docstring in the tree holds
what a newer compiler refuses."""

import ast
import importlib
from pathlib import Path

import pytest

from tools.pythons import PACKAGES, module_names

ROOT = Path(__file__).resolve().parents[1]


def test_the_walk_finds_the_modules_of_both_packages() -> None:
    names = module_names()
    assert {"servicekit.humane", "echomq_trio.__main__", "codemojex.run"} <= set(names)
    assert "codemojex.standin.bot_api" in names  # subpackages are walked too
    sources = [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")]
    assert len(names) == len(sources)  # one name for each file, none missed


@pytest.mark.parametrize("name", module_names())
def test_every_module_imports(name: str) -> None:
    assert importlib.import_module(name).__name__ == name


def docstrings(tree: ast.Module) -> list[tuple[int, str]]:
    """The docstring of the module and of every class and function, with its line."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            text = ast.get_docstring(node, clean=False)
            if text is not None:
                found.append((node.body[0].lineno, text))
    return found


def unencodable(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return True
    return False


def test_no_docstring_holds_a_surrogate() -> None:
    """Python 3.13 and later encode a docstring as UTF-8 when compiling it, so a docstring with a
    lone surrogate (a ``\\ud83c`` escape written with one backslash) fails the whole module's
    import there while 3.11 and 3.12 take it. Checked on the source, so any Python sees it."""
    bad = []
    for pkg in (*PACKAGES, "tests", "tools"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            bad += [f"{path.relative_to(ROOT)}:{line}" for line, text in docstrings(tree)
                    if unencodable(text)]  # fmt: skip
    assert not bad, "docstrings with a surrogate (write the escape as \\\\uXXXX): " + str(bad)


def test_the_surrogate_check_sees_one() -> None:
    tree = ast.parse('def f():\n    """reads \\ud83c\\udfc6"""\n')
    assert [unencodable(text) for _, text in docstrings(tree)] == [True]
    tree = ast.parse('def f():\n    """reads \\\\ud83c\\\\udfc6"""\n')
    assert [unencodable(text) for _, text in docstrings(tree)] == [False]
