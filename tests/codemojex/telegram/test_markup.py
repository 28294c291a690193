"""Telegram's formatting options as the stand-in applies them (pure): plain text and entities
(UTF-16 offsets), Telegram's "can't parse entities" errors, trimming."""

from __future__ import annotations

import html

import pytest
from hypothesis import given
from hypothesis import strategies as st

from codemojex.telegram.markup import Entity, Formatted, MarkupError, apply, trim


def kinds(f: Formatted) -> list[tuple[str, int, int]]:
    return [(e.type, e.offset, e.length) for e in f.entities]


def test_html_tags_entities_and_references() -> None:
    f = apply("<b>a <i>b</i></b> &lt;x&gt; &amp; &quot; &#128512; &#x41; &nbsp;", "HTML")
    assert f.text == 'a b <x> & " 😀 A &nbsp;'  # only the four named entities are known
    assert kinds(f) == [("bold", 0, 3), ("italic", 2, 1)]
    f = apply('<a href="https://e.x/?a=1&amp;b=2">link</a> <code>c</code>', "html")
    assert f.entities == (Entity("text_link", 0, 4, url="https://e.x/?a=1&b=2"),
                          Entity("code", 5, 1))  # fmt: skip
    f = apply('<pre><code class="language-python">x = 1</code></pre>', "HTML")
    assert f.entities == (Entity("pre", 0, 5, language="python"),)
    f = apply('<span class="tg-spoiler">s</span><tg-spoiler>t</tg-spoiler><s>u</s>', "HTML")
    assert kinds(f) == [("spoiler", 0, 1), ("spoiler", 1, 1), ("strikethrough", 2, 1)]


def test_offsets_count_utf16_units() -> None:
    f = apply("😀😀 <b>x</b>", "HTML")  # each emoji counts 2
    assert kinds(f) == [("bold", 5, 1)]
    assert kinds(apply("😀 *b*", "MarkdownV2")) == [("bold", 3, 1)]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("a < b", 'Unsupported start tag "" at byte offset 2'),
        ("line<br>break", 'Unsupported start tag "br" at byte offset 4'),
        ("é<br>", 'Unsupported start tag "br" at byte offset 2'),  # bytes, not characters
        ("<b>bold", 'Can\'t find end tag corresponding to start tag "b"'),
        ("<b>x</i>", 'Unmatched end tag at byte offset 4, expected "</b>", found "</i>"'),
        ("x</b>", "Unexpected end tag at byte offset 1"),
        ("<b", "Unclosed start tag at byte offset 0"),
        ("<b>x</b", "Unclosed end tag at byte offset 4"),
    ],
)
def test_malformed_html(text: str, error: str) -> None:
    with pytest.raises(MarkupError) as info:
        apply(text, "HTML")
    assert str(info.value) == error


def test_markdown_v2_entities_and_escapes() -> None:
    f = apply(r"*b* _i_ __u__ ~s~ ||sp|| `c\`` [t](https://e.x/\)) 1\.5 \*", "MarkdownV2")
    assert f.text == "b i u s sp c` t 1.5 *"
    assert kinds(f) == [("bold", 0, 1), ("italic", 2, 1), ("underline", 4, 1),
                        ("strikethrough", 6, 1), ("spoiler", 8, 2), ("code", 11, 2),
                        ("text_link", 14, 1)]  # fmt: skip
    assert f.entities[-1].url == "https://e.x/)"
    f = apply("```python\nprint(1)\n```", "MarkdownV2")
    assert (f.text, f.entities) == ("print(1)", (Entity("pre", 0, 8, language="python"),))
    assert kinds(apply(">quoted\n>lines\nafter", "MarkdownV2")) == [("blockquote", 0, 12)]
    assert kinds(apply("*bold _and italic_*", "MarkdownV2")) == [("bold", 0, 15), ("italic", 5, 10)]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("Score: 1.5", "Character '.' is reserved and must be escaped with the preceding '\\'"),
        ("done!", "Character '!' is reserved and must be escaped with the preceding '\\'"),
        ("a-b", "Character '-' is reserved and must be escaped with the preceding '\\'"),
        ("*bold", "Can't find end of Bold entity at byte offset 0"),
        ("é _it", "Can't find end of Italic entity at byte offset 3"),
        ("*x _y* z_", "Can't find end of Italic entity at byte offset 3"),
        ("`code", "Can't find end of Code entity at byte offset 0"),
    ],
)
def test_malformed_markdown_v2(text: str, error: str) -> None:
    with pytest.raises(MarkupError) as info:
        apply(text, "MarkdownV2")
    assert str(info.value) == error


def test_legacy_markdown() -> None:
    f = apply("*b* _i_ `c` [t](https://e.x) 1.5!", "Markdown")
    assert f.text == "b i c t 1.5!"
    assert kinds(f) == [("bold", 0, 1), ("italic", 2, 1), ("code", 4, 1), ("text_link", 6, 1)]
    with pytest.raises(MarkupError, match="Can't find end of the entity starting at byte offset 2"):
        apply("a *b", "Markdown")


def test_trimmed_as_telegram_trims() -> None:
    assert apply("  \n hi \n ", None) == Formatted("hi")
    assert apply("   ", None) == Formatted("")
    assert apply(" <b> x </b> <i>y</i> ", "HTML") == Formatted(
        "x  y", (Entity("bold", 0, 2), Entity("italic", 3, 1))
    )
    assert trim(Formatted(" <", (Entity("bold", 0, 1),))) == Formatted("<")  # empty: dropped


@given(st.text(max_size=60))
def test_escaped_text_always_parses_back_to_itself(text: str) -> None:
    # What the game relies on: html.escape makes any name safe inside HTML markup.
    assert apply(f"<b>{html.escape(text, quote=False)}</b>", "HTML").text == text.strip()
