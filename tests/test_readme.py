"""The README's examples run as written: embedding the bus, and per-lane dispatch."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.server

ROOT = Path(__file__).resolve().parents[1]


def test_embedding_example_runs() -> None:
    text = (ROOT / "README.md").read_text()
    match = re.search(r"<!-- embed-example.*?-->\s*```python\n(.*?)```", text, re.S)
    assert match, "the README lost its embedding example"
    done = subprocess.run(
        [sys.executable, "-c", match.group(1)], capture_output=True, text=True, timeout=60,
        cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "now" in done.stdout and "later" in done.stdout


def test_per_lane_example_runs() -> None:
    text = (ROOT / "README.md").read_text()
    match = re.search(r"<!-- lanes-example.*?-->\s*```python\n(.*?)```", text, re.S)
    assert match, "the README lost its per-lane example"
    done = subprocess.run(
        [sys.executable, "-c", match.group(1)], capture_output=True, text=True, timeout=60,
        cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "[('alice', ['1', '2', '3']), ('bob', ['1', '2', '3'])]" in done.stdout, done.stdout
