"""The docs site says what the code does: its generated pages and figures are current, the
README is a short landing page that links every page, every metric and environment variable the
code has is documented, and (slow) the site builds with warnings as errors and its reference
documents every name of every public module's ``__all__``, and no other.

The Python examples of the pages run in ``tests/test_docs_examples.py``.
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_surface import BUS_SURFACE
from tools import bench_figures, docs

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README_MAX_BYTES = 12 * 1024


def site_pages() -> list[Path]:
    """Every page of the site (not the files pages include, not the module pages, which the
    reference's index lists)."""
    return [
        p
        for p in sorted(DOCS.rglob("*.md"))
        if not ({"_build", "_generated", "_intersphinx"} & set(p.parts))
        and p.parent != DOCS / "reference" / "api"
    ]


def test_every_public_module_of_the_bus_has_a_reference_page() -> None:
    """A module in ``tests/test_surface.py``'s list has ``docs/reference/api/<module>.md``
    (copy a neighbour's: a title and ``{apimodule} <module>``), and no page outlives its module."""
    pages = {p.stem for p in (DOCS / "reference" / "api").glob("*.md")}
    assert pages == set(BUS_SURFACE) - {"echomq_trio.__main__"}
    for name in pages:
        page = (DOCS / "reference" / "api" / f"{name}.md").read_text()
        assert f"```{{apimodule}} {name}\n" in page, name


def test_the_generated_pages_are_current() -> None:
    """The command lines, the settings (each default the code's) and the metrics tables:
    ``python3 -m tools.docs`` writes them."""
    assert docs.stale() == [], "run python3 -m tools.docs and commit what it writes"


def test_the_settings_page_shows_the_code_s_defaults() -> None:
    from codemojex.settings import Settings

    page = (docs.OUT / "settings.md").read_text()
    d = Settings()
    for flag, value in [("--page-port", d.page_port), ("--round-length", f"{d.round_s:g}"),
                        ("--digest-tz", d.digest_tz), ("--updates", d.updates)]:  # fmt: skip
        row = next(line for line in page.splitlines() if line.startswith(f"| `{flag}` |"))
        assert f"| `{value}` |" in row, row


def test_the_figures_are_drawn_from_the_data_as_it_is() -> None:
    assert bench_figures.stale() == [], "run python3 -m tools.bench_figures and commit"


def test_a_figure_knows_the_data_it_was_drawn_from(tmp_path: Path) -> None:
    figure = bench_figures.FIGURES / "headline.png"
    source = bench_figures.DATA / bench_figures.FIGURES_FROM["headline.png"][0]
    assert bench_figures.png_text(figure)[bench_figures.KEY] == bench_figures.digest(source)
    other = tmp_path / "other.json"
    other.write_text(source.read_text().replace("14529", "14530"))
    assert bench_figures.digest(other) != bench_figures.digest(source)


def test_every_data_file_has_its_command_and_machine() -> None:
    import json

    files = sorted(bench_figures.DATA.glob("*.json"))
    assert files
    for path in files:
        data = json.loads(path.read_text())
        assert data.get("command") and data.get("machine"), path.name
    used = {source for source, _ in bench_figures.FIGURES_FROM.values()}
    assert used == {p.name for p in files}, "a data file without a figure, or the reverse"


def test_the_readme_is_a_short_landing_page() -> None:
    size = len((ROOT / "README.md").read_bytes())
    assert size < README_MAX_BYTES, f"README.md is {size} bytes: move the detail into docs/"


def _readme_links() -> Iterator[str]:
    text = (ROOT / "README.md").read_text()
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if not re.match(r"[a-z]+:", target):
            yield target.split("#", 1)[0]


def test_the_readme_links_every_page_and_only_what_is_there() -> None:
    linked = set(_readme_links())
    missing = [str(p.relative_to(ROOT)) for p in site_pages()
               if str(p.relative_to(ROOT)) not in linked]  # fmt: skip
    assert missing == [], f"README.md links no {missing}: add them to its list of the site"
    broken = [t for t in linked if not (ROOT / t).exists()]
    assert broken == [], broken


def test_the_metrics_page_names_every_metric_the_code_makes() -> None:
    """The hand-written tables (label values, what to alert on) name the metrics the code makes,
    every one and no other."""
    page = (DOCS / "reference" / "metrics.md").read_text().split("## Every metric", 1)[0]
    named = set()
    for line in page.splitlines():
        if line.startswith("| `"):
            named |= set(re.findall(r"`((?:echomq|codemojex)_[a-z_]+)`", line.split(" | ")[0]))
    assert named == {m.name for m in docs.all_metrics()}


def test_every_environment_variable_the_code_reads_is_documented() -> None:
    said = "\n".join(p.read_text() for p in DOCS.rglob("*.md") if "_build" not in p.parts)
    read = set()
    for package in ("echomq_trio", "codemojex", "servicekit"):
        for path in (ROOT / package).rglob("*.py"):
            read |= set(re.findall(r"\"((?:ECHOMQ|CODEMOJEX)_[A-Z_]+)\"", path.read_text()))
    assert read, "the pattern finds nothing: it has rotted"
    assert sorted(v for v in read if v not in said) == []


# --- the build -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site built as CI builds it: warnings are errors."""
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         str(DOCS), str(out)],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-6000:]
    return out


def _documented(built: Path) -> set[str]:
    from sphinx.util.inventory import InventoryFile

    with (built / "objects.inv").open("rb") as f:
        inventory = InventoryFile.load(f, "", lambda base, uri: uri)
    data = getattr(inventory, "data", inventory)
    return {name for kind, entries in data.items() if kind.startswith("py:") for name in entries}


def _exports() -> dict[str, list[str]]:
    return {
        name: list(getattr(importlib.import_module(name), "__all__", ()))
        for name in BUS_SURFACE
        if name != "echomq_trio.__main__"  # the command: its page is reference/cli
    }


@pytest.mark.slow
def test_the_site_builds_with_warnings_as_errors(built: Path) -> None:
    assert (built / "index.html").is_file()
    assert (built / "design" / "lifecycle.html").read_text().count("<svg") >= 1


@pytest.mark.slow
def test_the_reference_documents_every_name_of_every_public_module(built: Path) -> None:
    """Each name of a public module's ``__all__`` is documented on its page, or, re-exported
    from another public module, on that module's page; and each module-level name the reference
    documents is in its module's ``__all__``."""
    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        from apimodule import split_exports
    finally:
        sys.path.remove(str(DOCS / "_ext"))
    documented = _documented(built)
    exports = _exports()
    missing = []
    for module in exports:
        here, elsewhere = split_exports(module)
        missing += [f"{module}.{n}" for n in here if f"{module}.{n}" not in documented]
        missing += [f"{home or module}.{n}" for n, home in elsewhere
                    if f"{home or module}.{n}" not in documented]  # fmt: skip
    assert missing == []
    extra = []
    for name in documented:
        module = max((m for m in exports if name.startswith(m + ".")), key=len, default=None)
        if module is None or name in BUS_SURFACE:  # a module's own entry
            continue
        rest = name[len(module) + 1 :]
        if "." not in rest and rest not in exports[module]:
            extra.append(name)
    assert extra == [], "documented but not in __all__"
