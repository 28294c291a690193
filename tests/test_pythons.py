"""The Pythons the package claims: ``requires-python`` read as CI reads it (``tools/pythons.py``),
and the README's quick start naming the same ones."""

import re
from pathlib import Path

import pytest

from tools.pythons import claimed, requires_python

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("spec", "versions"),
    [
        (">=3.11,<3.14", ["3.11", "3.12", "3.13"]),
        (">=3.11, <3.13", ["3.11", "3.12"]),
        ("~=3.12.0", ["3.12"]),
        (">=3.10,!=3.11.*,<3.13", ["3.10", "3.12"]),
    ],
)
def test_the_claimed_minor_versions(spec: str, versions: list[str]) -> None:
    assert claimed(spec) == versions


@pytest.mark.parametrize(
    ("spec", "words"),
    [(">=3.11", "has no upper bound"), ("<3.0", "admits no Python 3 version")],
)
def test_a_claim_ci_cannot_check_is_refused(spec: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        claimed(spec)


def test_the_readme_names_the_pythons_the_package_claims() -> None:
    versions = claimed(requires_python())
    assert versions[0] == "3.11"  # what ruff and mypy target (pyproject.toml)
    quick_start = (ROOT / "README.md").read_text().split("## Quick start", 1)[1]
    named = re.search(r"with Python ([\d., or]+?) and pip", quick_start)
    assert named, "the quick start no longer names its Pythons"
    assert re.findall(r"3\.\d+", named[1]) == versions
    assert f"`requires-python` admits (`{requires_python()}`)" in quick_start
