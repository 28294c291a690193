"""Sphinx configuration of the echomq_trio + codemojex site (``just docs``, or
``python3 -m sphinx -W --keep-going -b html docs docs/_build/html``).

The build is offline and reproducible: intersphinx reads the two inventories shipped in
``docs/_intersphinx/`` (see the README there), the state diagram is drawn by Graphviz's ``dot``
(Debian's ``graphviz``), and the generated pages under ``docs/reference/_generated/`` are written
by ``python3 -m tools.docs`` (a test fails when they are stale)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the packages of this tree, not an installed copy
sys.path.insert(0, str(HERE / "_ext"))

project = "echomq_trio + codemojex"
author = "the echomq_trio authors"
copyright = "2026, the echomq_trio authors"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.intersphinx",
    "sphinx.ext.graphviz",
    "statediagram",
    "apimodule",
    "keyschema",
    "cancellation",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "_intersphinx", "reference/_generated", "**/README.md"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 4

intersphinx_mapping = {
    "python": ("https://docs.python.org/3", str(HERE / "_intersphinx" / "python.inv")),
    "trio": ("https://trio.readthedocs.io/en/stable", str(HERE / "_intersphinx" / "trio.inv")),
}
intersphinx_disabled_reftypes = ["*"]  # only explicit python:/trio: roles reach out

autodoc_member_order = "bysource"
autodoc_default_options: dict[str, object] = {}
autodoc_typehints = "description"
autodoc_typehints_format = "short"
# The docstrings are the code's own prose: a type hint that names a private or third-party class
# the reference does not document is not a broken link worth failing the build for.
nitpicky = False

graphviz_output_format = "svg"

html_theme = "furo"
html_title = "echomq_trio"
html_static_path = ["_static"]
html_css_files = ["site.css"]
html_show_sphinx = False
