"""Telegram's formatting options as Telegram applies them (pure): a ``text`` sent with
``parse_mode`` HTML, MarkdownV2 or Markdown becomes the plain text a user sees plus its
``entities`` (offsets and lengths in UTF-16 code units, as the Bot API counts them), or a
:class:`MarkupError` whose description is what Telegram answers after "Bad Request: can't parse
entities: ".

What it follows: the Bot API's "Formatting options" (https://core.telegram.org/bots/api#formatting-
options): the tags and the named entities of HTML (``&lt;`` ``&gt;`` ``&amp;`` ``&quot;``, and every
numeric one), MarkdownV2's reserved characters ("Any character with code between 1 and 126
inclusively can be escaped anywhere with a preceding '\\' character"; ``_*[]()~`>#+-=|{}.!`` must be
escaped outside entities; inside ``pre`` and ``code`` only `````` and ``\\``), and legacy Markdown.
The error wordings are those the Bot API server passes on from TDLib's parser, as bots meet them
("Unsupported start tag \\"br\\" at byte offset 7", "Can't find end tag corresponding to start tag
\\"b\\"", "Character '.' is reserved and must be escaped with the preceding '\\\\'", "Can't find end
of Bold entity at byte offset 0"); byte offsets count UTF-8 bytes of the text sent.

Afterwards the plain text is trimmed as Telegram trims a message (leading and trailing
whitespace), and the entities are moved and clipped with it (``trim``).

Two users: ``text.check_text`` (so ``check_notice``) refuses a text whose markup Telegram would
refuse, and measures its length as Telegram does (after parsing); the Bot API stand-in applies it
to what it delivers.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import attrs

__all__ = ["Entity", "Formatted", "MarkupError", "apply", "entities_json", "trim"]


@attrs.frozen
class Entity:
    """One MessageEntity: ``type`` is the Bot API's name (``bold``, ``text_link``, ...)."""

    type: str
    offset: int  # UTF-16 code units from the start of the plain text
    length: int  # UTF-16 code units
    url: str | None = None  # text_link
    language: str | None = None  # pre

    def as_json(self) -> dict[str, object]:
        out: dict[str, object] = {"offset": self.offset, "length": self.length, "type": self.type}
        if self.url is not None:
            out["url"] = self.url
        if self.language is not None:
            out["language"] = self.language
        return out


@attrs.frozen
class Formatted:
    text: str
    entities: tuple[Entity, ...] = ()


class MarkupError(ValueError):
    """The text does not parse in its ``parse_mode``; ``str(e)`` is TDLib's description."""


def apply(text: str, parse_mode: str | None) -> Formatted:
    """The plain text and entities of ``text`` in ``parse_mode`` (case-insensitive; ``None``:
    plain), trimmed as Telegram trims; ``MarkupError`` when it does not parse."""
    mode = (parse_mode or "").lower()
    if mode == "html":
        parsed = _Html(text).parse()
    elif mode == "markdownv2":
        parsed = _MarkdownV2(text).parse()
    elif mode == "markdown":
        parsed = _Markdown(text).parse()
    else:
        parsed = Formatted(text)
    return trim(parsed)


def _units(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def trim(formatted: Formatted) -> Formatted:
    """Strip leading and trailing whitespace as Telegram does, moving and clipping entities
    (an entity left empty is dropped)."""
    text = formatted.text
    stripped = text.strip()
    if stripped == text:
        return formatted
    if not stripped:
        return Formatted("")
    start = _units(text[: len(text) - len(text.lstrip())])
    end = start + _units(stripped)
    entities = []
    for e in formatted.entities:
        lo, hi = max(e.offset, start), min(e.offset + e.length, end)
        if hi > lo:
            entities.append(attrs.evolve(e, offset=lo - start, length=hi - lo))
    return Formatted(stripped, tuple(entities))


class _Builder:
    """The plain text being built, its length in UTF-16 units, and the entities closed."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.out: list[str] = []
        self.units = 0
        self.entities: list[Entity] = []

    def add(self, chars: str) -> None:
        self.out.append(chars)
        self.units += _units(chars)

    def close(self, kind: str, start: int, url: str | None = None, lang: str | None = None) -> None:
        if self.units > start:  # Telegram drops empty entities
            self.entities.append(Entity(kind, start, self.units - start, url, lang))

    def byte_offset(self, index: int) -> int:
        return len(self.source[:index].encode())

    def result(self) -> Formatted:
        ordered = sorted(self.entities, key=lambda e: (e.offset, -e.length))
        return Formatted("".join(self.out), tuple(ordered))


# ---- HTML ---------------------------------------------------------------------------------

_HTML_TAGS = {
    "b": "bold", "strong": "bold", "i": "italic", "em": "italic", "u": "underline",
    "ins": "underline", "s": "strikethrough", "strike": "strikethrough", "del": "strikethrough",
    "span": "spoiler", "tg-spoiler": "spoiler", "a": "text_link", "code": "code", "pre": "pre",
    "blockquote": "blockquote", "tg-emoji": "custom_emoji",
}  # fmt: skip
_NAMED = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}
_REFERENCE = re.compile(r"&(?:(lt|gt|amp|quot)|#(\d{1,7})|#[xX]([0-9a-fA-F]{1,6}));")
_NAME = re.compile(r"[A-Za-z0-9-]*")
_ATTRIBUTE = re.compile(r"[A-Za-z0-9_-]+")


def _unescape(text: str) -> str:
    def one(m: re.Match[str]) -> str:
        if m.group(1):
            return _NAMED[m.group(1)]
        code = int(m.group(2)) if m.group(2) else int(m.group(3), 16)
        return chr(code) if 0 < code < 0x110000 and not 0xD800 <= code < 0xE000 else m.group(0)

    return _REFERENCE.sub(one, text)


@attrs.define
class _Open:
    name: str  # the tag (HTML) or the marker (Markdown)
    kind: str  # the entity type
    start: int  # UTF-16 offset in the plain text
    at: int  # index in the source, for the error's byte offset
    url: str | None = None
    language: str | None = None


class _Html(_Builder):
    def parse(self) -> Formatted:
        s, i, n = self.source, 0, len(self.source)
        stack: list[_Open] = []
        while i < n:
            c = s[i]
            if c == "&":
                m = _REFERENCE.match(s, i)
                if m:
                    self.add(_unescape(m.group(0)))
                    i = m.end()
                else:
                    self.add("&")
                    i += 1
            elif c == "<" and i + 1 < n and s[i + 1] == "/":
                i = self._end_tag(i, stack)
            elif c == "<":
                i = self._start_tag(i, stack)
            else:
                j = i + 1
                while j < n and s[j] not in "<&":
                    j += 1
                self.add(s[i:j])
                i = j
        if stack:
            raise MarkupError(f'Can\'t find end tag corresponding to start tag "{stack[-1].name}"')
        return self.result()

    def _start_tag(self, i: int, stack: list[_Open]) -> int:
        s = self.source
        m = _NAME.match(s, i + 1)
        assert m is not None
        name = m.group(0).lower()
        if name not in _HTML_TAGS:
            raise MarkupError(
                f'Unsupported start tag "{name}" at byte offset {self.byte_offset(i)}'
            )
        attributes: dict[str, str] = {}
        j = m.end()
        while True:
            while j < len(s) and s[j].isspace():
                j += 1
            if j >= len(s):
                raise MarkupError(f"Unclosed start tag at byte offset {self.byte_offset(i)}")
            if s[j] == ">":
                break
            a = _ATTRIBUTE.match(s, j)
            if a is None:
                raise MarkupError(
                    f'Empty attribute name in the tag "{name}" at byte offset {self.byte_offset(j)}'
                )
            key, j = a.group(0).lower(), a.end()
            value = ""
            if j < len(s) and s[j] == "=":
                j += 1
                if j < len(s) and s[j] in "'\"":
                    close = s.find(s[j], j + 1)
                    if close < 0:
                        raise MarkupError(
                            f"Unclosed start tag at byte offset {self.byte_offset(i)}"
                        )
                    value, j = _unescape(s[j + 1 : close]), close + 1
                else:
                    v = re.compile(r"[^\s>]*").match(s, j)
                    assert v is not None
                    value, j = _unescape(v.group(0)), v.end()
            attributes[key] = value
        kind = _HTML_TAGS[name]
        if name == "span" and attributes.get("class") != "tg-spoiler":
            raise MarkupError(f'Tag "span" must have class "tg-spoiler" at byte offset '
                              f"{self.byte_offset(i)}")  # fmt: skip
        if name == "blockquote" and "expandable" in attributes:
            kind = "expandable_blockquote"
        opened = _Open(name, kind, self.units, i, url=attributes.get("href"))
        if name == "code" and stack and stack[-1].name == "pre":
            language = attributes.get("class", "")
            if language.startswith("language-"):
                stack[-1].language = language.removeprefix("language-")
        stack.append(opened)
        return j + 1

    def _end_tag(self, i: int, stack: list[_Open]) -> int:
        s = self.source
        m = _NAME.match(s, i + 2)
        assert m is not None
        name, j = m.group(0).lower(), m.end()
        while j < len(s) and s[j].isspace():
            j += 1
        if j >= len(s) or s[j] != ">":
            raise MarkupError(f"Unclosed end tag at byte offset {self.byte_offset(i)}")
        if not stack:
            raise MarkupError(f"Unexpected end tag at byte offset {self.byte_offset(i)}")
        top = stack[-1]
        if name != top.name:
            raise MarkupError(f'Unmatched end tag at byte offset {self.byte_offset(i)}, '
                              f'expected "</{top.name}>", found "</{name}>"')  # fmt: skip
        stack.pop()
        if top.kind == "code" and stack and stack[-1].name == "pre":
            pass  # <pre><code class="language-x">: one pre entity with its language
        else:
            url = top.url if top.kind == "text_link" else None
            self.close(top.kind, top.start, url, top.language if top.kind == "pre" else None)
        return j + 1


# ---- MarkdownV2 ---------------------------------------------------------------------------

_RESERVED_V2 = set("_*[]()~`>#+-=|{}.!")
_NAMES = {"bold": "Bold", "italic": "Italic", "underline": "Underline",
          "strikethrough": "Strikethrough", "spoiler": "Spoiler", "code": "Code", "pre": "Pre",
          "text_link": "TextUrl"}  # fmt: skip


def _reserved(c: str) -> MarkupError:
    return MarkupError(f"Character '{c}' is reserved and must be escaped with the preceding '\\'")


class _MarkdownV2(_Builder):
    def parse(self) -> Formatted:
        s, i, n = self.source, 0, len(self.source)
        stack: list[_Open] = []
        while i < n:
            c = s[i]
            top = stack[-1] if stack else None
            if c == "\\" and i + 1 < n and 0 < ord(s[i + 1]) <= 126:
                self.add(s[i + 1])
                i += 2
            elif top is not None and top.kind in ("code", "pre"):
                marker = top.name
                if s.startswith(marker, i):
                    stack.pop()
                    self.close(top.kind, top.start, lang=top.language)
                    i += len(marker)
                else:
                    self.add(c)
                    i += 1
            elif c == "`":
                if s.startswith("```", i):
                    end_of_line = s.find("\n", i + 3)
                    language = s[i + 3 : end_of_line] if end_of_line >= 0 else ""
                    if end_of_line >= 0 and language and " " not in language:
                        stack.append(_Open("```", "pre", self.units, i, language=language))
                        i = end_of_line + 1
                    else:
                        stack.append(_Open("```", "pre", self.units, i))
                        i += 3
                else:
                    stack.append(_Open("`", "code", self.units, i))
                    i += 1
            elif c in "*_~" or s.startswith("||", i):
                marker = "__" if s.startswith("__", i) else "||" if c == "|" else c
                kind = {"*": "bold", "_": "italic", "__": "underline", "~": "strikethrough",
                        "||": "spoiler"}[marker]  # fmt: skip
                if top is not None and top.name == marker:
                    stack.pop()
                    self.close(kind, top.start)
                elif any(o.name == marker for o in stack):
                    assert top is not None
                    raise self._unclosed(top)
                else:
                    stack.append(_Open(marker, kind, self.units, i))
                i += len(marker)
            elif c == "[":
                stack.append(_Open("[", "text_link", self.units, i))
                i += 1
            elif c == "]" and top is not None and top.name == "[":
                if i + 1 >= n or s[i + 1] != "(":
                    raise _reserved("]")
                url, i = self._url(i + 2, top)
                stack.pop()
                self.close("text_link", top.start, url=url)
            elif c == ">" and (i == 0 or s[i - 1] == "\n"):
                i = self._quote(i)
            elif c in _RESERVED_V2:
                raise _reserved(c)
            else:
                self.add(c)
                i += 1
        if stack:
            raise self._unclosed(stack[-1])
        return self.result()

    def _unclosed(self, opened: _Open) -> MarkupError:
        name = _NAMES.get(opened.kind, opened.kind)
        return MarkupError(f"Can't find end of {name} entity at byte offset "
                           f"{self.byte_offset(opened.at)}")  # fmt: skip

    def _url(self, i: int, opened: _Open) -> tuple[str, int]:
        s, url = self.source, []
        while i < len(s) and s[i] != ")":
            if s[i] == "\\" and i + 1 < len(s):
                i += 1
            url.append(s[i])
            i += 1
        if i >= len(s):
            raise self._unclosed(opened)
        return "".join(url), i + 1

    def _quote(self, i: int) -> int:
        """A ``>`` at the start of a line: a blockquote to the end of the line (consecutive
        quoted lines make one)."""
        start = self.units
        s = self.source
        while i < len(s) and s[i] == ">":
            end = s.find("\n", i)
            line = s[i + 1 :] if end < 0 else s[i + 1 : end]
            inner = _MarkdownV2(line).parse()
            for e in inner.entities:
                self.entities.append(attrs.evolve(e, offset=e.offset + self.units))
            self.add(inner.text)
            if end < 0:
                i = len(s)
                break
            if end + 1 < len(s) and s[end + 1] == ">":
                self.add("\n")
            else:
                self.close("blockquote", start)
                self.add("\n")
                return end + 1
            i = end + 1
        self.close("blockquote", start)
        return i


# ---- legacy Markdown ----------------------------------------------------------------------


class _Markdown(_Builder):
    """``*bold*``, ``_italic_``, ```code```, ``` ```pre``` ```, ``[text](url)``; no nesting."""

    def parse(self) -> Formatted:
        s, i, n = self.source, 0, len(self.source)
        kinds = {"*": "bold", "_": "italic", "`": "code"}
        while i < n:
            c = s[i]
            if c == "\\" and i + 1 < n and s[i + 1] in "*_`[":
                self.add(s[i + 1])
                i += 2
            elif c in kinds or c == "[":
                marker = "```" if s.startswith("```", i) else "]" if c == "[" else c
                end = s.find(marker, i + (3 if marker == "```" else 1))
                if end < 0:
                    raise MarkupError(f"Can't find end of the entity starting at byte offset "
                                      f"{self.byte_offset(i)}")  # fmt: skip
                start = self.units
                if marker == "]":
                    self.add(s[i + 1 : end])
                    if end + 1 < n and s[end + 1] == "(" and ")" in s[end + 2 :]:
                        close = s.index(")", end + 2)
                        self.close("text_link", start, url=s[end + 2 : close])
                        i = close + 1
                    else:
                        i = end + 1
                    continue
                body = s[i + len(marker) : end]
                self.add(body)
                self.close("pre" if marker == "```" else kinds[c], start)
                i = end + len(marker)
            else:
                self.add(c)
                i += 1
        return self.result()


def entities_json(entities: Sequence[Entity]) -> list[dict[str, object]]:
    return [e.as_json() for e in entities]
