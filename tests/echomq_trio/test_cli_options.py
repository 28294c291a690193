"""Which server ``echomq`` talks to, without a server: every command's help shows the
connection options, they are taken before or after the command's name, and ``target`` picks
``--url``, ``--data-dir``, ``ECHOMQ_URL``, ``./codemojex-data``, the default in that order."""

from __future__ import annotations

from pathlib import Path

import pytest

from codemojex.settings import Settings
from echomq_trio import _address
from echomq_trio.__main__ import COMMANDS, DEFAULT_URL, FOUND_DATA_DIR, _parser, target
from echomq_trio._address import ServerAddress
from echomq_trio.errors import ConnectionLost, ServerNotRunning
from servicekit.cli import CliError

URL = "redis://:secret@127.0.0.1:7001"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_help_shows_the_connection_options(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        _parser().parse_args([command, "--help"])
    assert exited.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert f"usage: echomq {command}" in text
    for option in ("--url URL", "--data-dir DIR", "ECHOMQ_URL", "./codemojex-data"):
        assert option in text, f"`echomq {command} --help` does not mention {option}"


def test_connection_options_go_before_or_after_the_command() -> None:
    before = _parser().parse_args(["--url", "redis://a", "--json", "queues"])
    assert (before.url, before.data_dir, before.json) == ("redis://a", None, True)
    after = _parser().parse_args(["stats", "q", "--data-dir", "d", "--json"])
    assert (after.url, after.data_dir, after.json) == (None, "d", True)
    neither = _parser().parse_args(["queues"])
    assert (neither.url, neither.data_dir, neither.json) == (None, None, False)


def test_the_directory_looked_for_is_codemojex_runs_default() -> None:
    assert Settings().data_dir == FOUND_DATA_DIR


def _record(folder: Path, url: str = URL, port: int = 7001) -> ServerAddress:
    folder.mkdir(exist_ok=True)
    record = ServerAddress.running(url, "127.0.0.1", port, 42)
    _address.write(folder, record)
    return record


def test_flags_first_then_the_environment_then_codemojex_data(tmp_path: Path) -> None:
    found = tmp_path / FOUND_DATA_DIR
    other = tmp_path / "other"
    env = {"ECHOMQ_URL": "redis://env:6379"}
    assert target(None, None, {}, tmp_path).url == DEFAULT_URL  # nothing recorded here
    assert target(None, None, {}, tmp_path).default
    _record(found)
    picked = target(None, None, {}, tmp_path)
    assert (picked.url, picked.data_dir) == (URL, found)
    assert picked.note is not None and str(found) in picked.note and "127.0.0.1:7001" in picked.note
    assert "secret" not in picked.note
    assert target(None, None, env, tmp_path).url == "redis://env:6379"
    assert target("redis://flag:1", None, env, tmp_path).url == "redis://flag:1"
    _record(other, "redis://:x@127.0.0.1:9", 9)
    named = target(None, str(other), env, tmp_path)
    assert (named.url, named.data_dir, named.note) == ("redis://:x@127.0.0.1:9", other, None)
    with pytest.raises(CliError, match="--url or --data-dir, not both") as both:
        target("redis://flag:1", str(other), {}, tmp_path)
    assert both.value.status == 2


def test_a_stopped_record_found_by_itself_is_one_line_naming_it(tmp_path: Path) -> None:
    found = tmp_path / FOUND_DATA_DIR
    _address.write(found, _record(found).stopped())
    with pytest.raises(ServerNotRunning, match=rf"^the server of {found} is stopped"):
        target(None, None, {}, tmp_path)


def test_a_refused_connection_says_what_to_pass_or_which_record_is_stale(tmp_path: Path) -> None:
    refused = ConnectionLost("cannot connect to redis://127.0.0.1:6379/0: connection refused")
    hint = str(target(None, None, {}, tmp_path).unreachable(refused))
    assert hint.startswith(str(refused)) and "pass --url URL or set ECHOMQ_URL" in hint
    assert "--data-dir DIR" in hint
    assert target("redis://x:1", None, {}, tmp_path).unreachable(refused) is refused
    _record(tmp_path / "d")
    stale = str(target(None, str(tmp_path / "d"), {}, tmp_path).unreachable(refused))
    assert stale.startswith(f"the server recorded in {tmp_path / 'd'} (127.0.0.1:7001, pid 42)")
