"""The README's examples run as written: embedding the bus, and per-lane dispatch."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.server

ROOT = Path(__file__).resolve().parents[1]


def run_example(tag: str) -> str:
    """Run the README's Python block marked ``<!-- tag: ... -->``; its output (it must exit 0)."""
    text = (ROOT / "README.md").read_text()
    match = re.search(rf"<!-- {tag}.*?-->\s*```python\n(.*?)```", text, re.S)
    assert match, f"the README lost its {tag}"
    done = subprocess.run(
        [sys.executable, "-c", match.group(1)], capture_output=True, text=True, timeout=60,
        cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_embedding_example_runs() -> None:
    out = run_example("embed-example")
    assert "now" in out and "later" in out


def test_per_lane_example_runs() -> None:
    out = run_example("lanes-example")
    assert "[('alice', ['1', '2', '3']), ('bob', ['1', '2', '3'])]" in out, out
