"""Regenerate ``codemojex/game/web/emoji.ttf``: the game's emoji, cut out of Noto Color Emoji so
the leaderboard page renders them on a machine with no emoji font (headless Chromium on a bare
Debian shows tofu otherwise). The font is Google's Noto Color Emoji, under the SIL Open Font
License 1.1 (``codemojex/game/web/OFL.txt``), from Debian's ``fonts-noto-color-emoji``:

    apt-get install fonts-noto-color-emoji   # or: apt-get download it and dpkg-deb -x it
    python3 -m pip install fonttools
    python3 -m tools.emoji_font [/usr/share/fonts/truetype/noto/NotoColorEmoji.ttf]

The subset holds the game's alphabet (``codemojex.game.scoring.ALPHABET``), the emoji the game
and the page print (``EXTRA``) and the variation selector, about 30 colour bitmaps.
"""

from __future__ import annotations

import sys
from pathlib import Path

from fontTools import subset  # type: ignore[import-untyped]

from codemojex.game.scoring import ALPHABET

SOURCE = "/usr/share/fonts/truetype/noto/NotoColorEmoji.ttf"
OUT = Path(__file__).resolve().parent.parent / "codemojex" / "game" / "web" / "emoji.ttf"
EXTRA = "🏆⏰🎉🥇🥈🥉👑"  # the page's and the notices' own


def main(source: str = SOURCE) -> None:
    text = "".join(ALPHABET) + EXTRA
    codes = sorted({ord(c) for c in text} | {0xFE0F})
    options = subset.Options()
    options.drop_tables += ["DSIG"]
    options.name_IDs = ["*"]  # keep the copyright and licence records
    font = subset.load_font(source, options)
    subsetter = subset.Subsetter(options)
    subsetter.populate(unicodes=codes)
    subsetter.subset(font)
    subset.save_font(font, str(OUT), options)
    print(f"wrote {OUT} ({OUT.stat().st_size // 1024} KiB, {len(codes)} code points)")


if __name__ == "__main__":
    main(*sys.argv[1:])
