"""Write the state machine's tables, its diagram and every bus script's ``-- transition:`` header
from ``echomq_trio.states`` (the one source): ``python -m tools.states``; with ``--check`` write
nothing and exit 1 when a file differs (``tests/echomq_trio/test_states.py`` checks the same).

The README's generated parts sit between ``<!-- states: NAME -->`` and ``<!-- end states: NAME
-->`` lines; the prose around them is written by hand."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from echomq_trio import states

SCRIPTS = Path(__file__).resolve().parents[1] / "echomq_trio" / "scripts"
README = SCRIPTS / "README.md"


def readme_text(text: str) -> str:
    """``text`` (the README) with every generated part written anew."""
    for name, lines in states.readme_sections().items():
        begin, end = f"<!-- states: {name} -->", f"<!-- end states: {name} -->"
        if text.count(begin) != 1 or text.count(end) != 1:
            raise ValueError(f"{README.name} needs one '{begin}' and one '{end}' line")
        head, rest = text.split(begin + "\n", 1)
        _, tail = rest.split(end, 1)
        text = head + begin + "\n" + "\n".join(lines) + "\n" + end + tail
    return text


def header_text(name: str, text: str) -> str:
    """A script's ``text`` with its one ``-- transition:`` line written from the table."""
    new, n = re.subn(r"^-- transition: .*$", f"-- transition: {states.arrow(name)}", text,
                     flags=re.M)  # fmt: skip
    if n != 1:
        raise ValueError(f"{name}.lua needs exactly one '-- transition:' header line")
    return new


def generated() -> dict[Path, str]:
    """Every file this tool writes, with the text it should have."""
    out = {README: readme_text(README.read_text())}
    for name in states.SCRIPTS:
        path = SCRIPTS / f"{name}.lua"
        out[path] = header_text(name, path.read_text())
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 on a change")
    args = parser.parse_args(argv)
    wanted = generated()
    stale = [p for p, text in wanted.items() if p.read_text() != text]
    for path in stale:
        if args.check:
            print(f"{path.relative_to(SCRIPTS.parents[1])} differs from echomq_trio.states")
        else:
            path.write_text(wanted[path])
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
