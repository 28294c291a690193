"""Chat ids as the Bot API numbers them (pure)."""

import pytest

from codemojex.standin.chats import chat_json, chat_kind


@pytest.mark.parametrize(
    ("chat_id", "kind"),
    [
        (1, "private"),
        ((1 << 40) - 1, "private"),
        (1 << 40, None),
        (0, None),
        (-1, "group"),
        (-100200, "group"),
        (-999_999_999_999, "group"),
        (-1_000_000_000_000, None),
        (-1_001_234_567_890, "supergroup"),
        (-1_997_852_516_352, "supergroup"),
        (-1_997_852_516_353, None),
    ],
)
def test_kind_by_id_range(chat_id: int, kind: str | None) -> None:
    assert chat_kind(chat_id) == kind


def test_groups_have_a_title_private_chats_a_first_name() -> None:
    assert chat_json(5, "private") == {"id": 5, "first_name": "User 5", "type": "private"}
    assert chat_json(-5, "group", "Team") == {"id": -5, "title": "Team", "type": "group",
                                              "all_members_are_administrators": True}  # fmt: skip
    assert "all_members_are_administrators" not in chat_json(-1001234567890, "supergroup")
    assert chat_json(-1001, "channel")["title"] == "Chat -1001"
