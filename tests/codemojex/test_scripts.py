"""The app's scripts against the rules the bus's keep (``tests/echomq_trio/test_scripts.py``):
each header names its transition, its cost, its KEYS and ARGV and what it returns; each answers
a map read by name (no integer codes unpacked by position), and the words of its ``outcome``
are the header's, the code's and the ones the Python that calls it reads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from codemojex.notify import rate_limiter
from codemojex.store import script

PACKAGE = Path(__file__).resolve().parents[2] / "codemojex"
APP_SCRIPTS = sorted(PACKAGE.rglob("scripts/*.lua"))


def _code(text: str) -> str:
    return re.sub(r"--[^\n]*", "", text)


def _header(path: Path) -> list[str]:
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("--"):
            break
        lines.append(line)
    return lines


@pytest.mark.parametrize("path", APP_SCRIPTS, ids=lambda p: p.stem)
def test_each_header_names_its_transition_cost_keys_argv_and_answer(path: Path) -> None:
    header = _header(path)
    assert header and header[0].startswith(f"-- {path.stem}: "), path.stem
    transitions = [line for line in header if line.startswith("-- transition: ")]
    assert len(transitions) == 1, f"{path.stem}.lua needs exactly one '-- transition:' line"
    arrow = transitions[0].removeprefix("-- transition: ")
    assert arrow.startswith("none") or " -> " in arrow, arrow
    costs = [line for line in header if line.startswith("-- cost: ")]
    assert len(costs) == 1, f"{path.stem}.lua needs exactly one '-- cost:' line"
    assert costs[0].removeprefix("-- cost: ").startswith("O("), costs[0]
    assert not re.search(r"\bevery\b", costs[0]), costs[0]
    text = "\n".join(header)
    assert "KEYS[1]" in text and "ARGV[1]" in text, path.stem
    assert re.search(r"^-- Returns \{", text, re.M), f"{path.stem}.lua says what it returns"
    code = _code(path.read_text())
    named = {int(n) for n in re.findall(r"ARGV\[(\d+)\]", text)}
    for first, last in re.findall(r"ARGV\[(\d+)\.\.(\d+)\]", text):
        named |= set(range(int(first), int(last) + 1))
    used = {int(n) for n in re.findall(r"ARGV\[(\d+)\]", code)}
    assert used <= named, f"{path.stem}.lua uses ARGV {sorted(used - named)}, not in its header"


@pytest.mark.parametrize("path", APP_SCRIPTS, ids=lambda p: p.stem)
def test_scripts_answer_maps_read_by_name(path: Path) -> None:
    code = _code(path.read_text())
    answers = re.findall(r"\breturn (\{[^\n]*)", code)
    top = [a for a in answers if not re.match(r"\{\s*$", a)]
    maps = [a for a in top if a.startswith("{'")]
    assert maps, f"{path.stem}.lua answers no map"
    for answer in top:
        if answer.startswith("{"):
            assert answer.startswith("{'"), f"{path.stem}.lua answers {answer}: not a map"
    assert not re.search(r"return \{-?\d", code), f"{path.stem}.lua answers an integer code"


@pytest.mark.parametrize("path", APP_SCRIPTS, ids=lambda p: p.stem)
def test_outcome_words_are_the_header_s_the_code_s_and_the_python_s(path: Path) -> None:
    header = "\n".join(_header(path))
    code = _code(path.read_text())
    said = set(re.findall(r"'(\w+)'", header.split("-- Returns", 1)[1]))
    answered = set(re.findall(r"'outcome', '(\w+)'", code))
    if "local outcome = " in code:  # chat_migrate: the word is chosen before the answer
        answered |= set(re.findall(r"outcome = '(\w+)'", code))
    python = set(script(path.stem).outcomes)
    assert answered == python, (path.stem, answered, python)
    assert python <= said, (path.stem, python - said)


def test_the_limiter_reads_every_word_of_rate_take() -> None:
    for word in script("rate_take").outcomes:
        got = {"outcome": word, "wait_ms": "5", "entry": "1:1", "ask_ms": "0", "now": "9"}
        take = rate_limiter._take(got)
        assert take.ok == (word == "taken")
        assert take.blocked_by == ("" if word == "taken" else word)
    with pytest.raises(ValueError, match="rate_take answered 'other'"):
        rate_limiter._take({"outcome": "other"})
