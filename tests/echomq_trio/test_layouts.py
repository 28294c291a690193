"""The registry of layout upgrades (``echomq_trio._layouts``) agrees with its scripts and with
the layout the scripts write (``LAYOUT`` in ``scripts/_bus.lua``). Pure: the upgrades themselves
run against real servers in ``test_counters.py``."""

from __future__ import annotations

import re
from pathlib import Path

from echomq_trio import _layouts, protocol

SCRIPTS = Path(__file__).resolve().parents[2] / "echomq_trio" / "scripts"


def _upgrade_headers() -> dict[str, int]:
    """Each script whose header says ``-- upgrade: layout N``, with N."""
    found = {}
    for path in SCRIPTS.glob("*.lua"):
        m = re.search(r"^-- upgrade: layout (\d+)$", path.read_text(), re.MULTILINE)
        if m:
            found[path.stem] = int(m.group(1))
    return found


def test_the_registry_is_in_order_and_ends_at_the_layout_the_scripts_write() -> None:
    layouts = [step.layout for step in _layouts.UPGRADES]
    assert layouts == sorted(set(layouts)), "each upgrade a later layout than the one before"
    assert layouts[-1] == _layouts.LAYOUT
    bus_lua = (SCRIPTS / "_bus.lua").read_text()
    (written,) = re.findall(r"^local LAYOUT = '(\d+)'$", bus_lua, re.MULTILINE)
    assert int(written) == _layouts.LAYOUT


def test_every_upgrade_script_is_in_the_registry_and_says_its_layout() -> None:
    assert _upgrade_headers() == {step.script: step.layout for step in _layouts.UPGRADES}


def test_each_upgrade_answers_named_fields() -> None:
    for step in _layouts.UPGRADES:
        assert step.script in protocol.REPLY_FIELDS
        assert step.what, "each upgrade says what it changes"
