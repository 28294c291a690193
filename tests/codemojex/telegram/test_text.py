"""A message's text as Telegram takes it (pure): ``check_text`` names what it checks, and
measures a text as Telegram does (notices: ``tests/codemojex/notify/test_notice.py``)."""

import pytest

from codemojex.telegram import MAX_TEXT, check_text, telegram_length


def test_length_counts_utf16_units() -> None:
    assert telegram_length("abc") == 3
    assert telegram_length("😀") == 2  # outside the Basic Multilingual Plane
    assert telegram_length("é") == 1


def test_a_text_is_given_back_when_telegram_takes_it() -> None:
    assert check_text("<b>hi</b>", "HTML") == "<b>hi</b>"
    assert check_text("😀" * (MAX_TEXT // 2)) == "😀" * (MAX_TEXT // 2)


@pytest.mark.parametrize(
    ("text", "mode", "words"),
    [
        ("", None, "a title must be a non-empty string"),
        ("😀" * (MAX_TEXT // 2 + 1), None, "a title is 4098 UTF-16 units long"),
        ("<b>x", "HTML", "a title does not parse as HTML"),
    ],
)
def test_a_refusal_names_the_text(text: str, mode: str | None, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        check_text(text, mode, what="a title")
