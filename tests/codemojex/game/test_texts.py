"""How the game marks up its texts (pure): a text carries the parse mode it was built for, and
a name shows as written in either mode (escaped in HTML, untouched in plain)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from codemojex.game.rules import MAX_NAME, clean_label
from codemojex.game.texts import Text, bold, escape, html, plain
from codemojex.telegram import markup

NAMES = st.text(min_size=1, max_size=MAX_NAME).map(lambda t: clean_label(t, MAX_NAME, "?"))


def test_a_text_carries_its_parse_mode_and_its_topic() -> None:
    assert plain("a <b>").opts() == {}
    assert html("<b>a</b>").opts() == {"parse_mode": "HTML"}
    assert html("x").opts(7) == {"parse_mode": "HTML", "message_thread_id": 7}
    assert plain("x").opts(7) == {"message_thread_id": 7}
    assert plain("x") == Text("x") and html("x") == Text("x", "HTML")


@given(NAMES | st.sampled_from(["<Eve> & *co*", "_Tom_ <b>x</b> &amp;", "a\u200db"]))
def test_a_name_shows_as_written_in_either_mode(name: str) -> None:
    built = html(f"{bold(escape(name))}: {escape(name)}")
    shown = markup.apply(built.body, built.parse_mode)
    assert shown.text == f"{name}: {name}".strip()
    said = plain(f"{name}: hi")
    assert markup.apply(said.body, said.parse_mode).text == f"{name}: hi".strip()
