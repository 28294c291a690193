"""The ``Chat`` objects the stand-in answers with (pure); what an id says of its chat is
``codemojex.telegram.chats``' (``tests/codemojex/telegram/test_chats.py``)."""

from codemojex.standin.chats import chat_json


def test_groups_have_a_title_private_chats_a_first_name() -> None:
    assert chat_json(5, "private") == {"id": 5, "first_name": "User 5", "type": "private"}
    assert chat_json(-5, "group", "Team") == {"id": -5, "title": "Team", "type": "group",
                                              "all_members_are_administrators": True}  # fmt: skip
    assert "all_members_are_administrators" not in chat_json(-1001234567890, "supergroup")
    assert chat_json(-1001, "channel")["title"] == "Chat -1001"
