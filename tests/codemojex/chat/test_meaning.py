"""What an update means, by rule (pure): commands with and without the bot's name, guesses,
and everything that is ignored on purpose; names cleaned for the game's input rules."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from codemojex.chat.meaning import (
    Chat,
    Command,
    Guess,
    Ignored,
    Sender,
    Upgraded,
    chat_of,
    display_name,
    meaning,
    update_id_of,
)
from codemojex.game.rules import MAX_NAME, MAX_TITLE, check_label, clean_label

BOT = "codemojex_bot"
GROUP = {"id": -100123, "type": "supergroup", "title": "Emoji Fans"}
ALICE = {"id": 42, "is_bot": False, "first_name": "Alice", "last_name": "Liddell"}


def message(text: str | None = None, *, chat: dict[str, Any] = GROUP,
            sender: dict[str, Any] | None = ALICE, **more: Any) -> dict[str, Any]:  # fmt: skip
    body: dict[str, Any] = {"message_id": 1, "date": 0, "chat": chat, **more}
    if sender is not None:
        body["from"] = sender
    if text is not None:
        body["text"] = text
    return {"update_id": 7, "message": body}


WHERE = Chat(-100123, "Emoji Fans", False)
WHO = Sender(42, "Alice Liddell")


@pytest.mark.parametrize(
    ("text", "name"),
    [("/newgame", "newgame"), ("/start", "start"), ("/round", "round"), ("/top", "top"),
     ("/me", "me"), ("/help", "help"), (f"/top@{BOT}", "top"), ("/TOP@CodeMojex_Bot", "top"),
     ("/round now please", "round")],
)  # fmt: skip
def test_commands_in_a_group(text: str, name: str) -> None:
    assert meaning(message(text), BOT) == Command(WHERE, WHO, name)


def test_a_text_of_emoji_is_a_guess() -> None:
    assert meaning(message("😀😂😍😎🤔😴"), BOT) == Guess(WHERE, WHO, "😀😂😍😎🤔😴")
    spaced = " 😀 😂 😍\n😎 🤔 😴 "
    assert meaning(message(spaced), BOT) == Guess(WHERE, WHO, spaced)
    # Six emoji the game does not use are still a guess: the game says what is wrong with it.
    assert isinstance(meaning(message("👍🏽❤️👨‍👩‍👧🎉"), BOT), Guess)
    for reaction in ("👍", "😂😂😂", "😀😂😍😎🤔😴🐶"):  # not six: conversation
        assert meaning(message(reaction), BOT) == Ignored("conversation")


@pytest.mark.parametrize(
    ("update", "reason"),
    [
        ({"update_id": 1, "edited_message": message("😀😂😍😎🤔😴")["message"]},
         "not a new message (edited_message)"),
        ({"update_id": 1, "channel_post": {"chat": GROUP, "text": "/top"}},
         "not a new message (channel_post)"),
        ({"update_id": 1}, "not a new message (empty)"),
        (message("/top", sender={"id": 9, "is_bot": True, "first_name": "Bot"}), "from a bot"),
        (message("/top", sender=None), "no sender"),
        (message(sticker={"file_id": "x", "emoji": "😀"}), "not a text message"),
        (message(photo=[{"file_id": "p"}], caption="😀😂😍😎🤔😴"), "not a text message"),
        (message(new_chat_members=[ALICE]), "not a text message"),
        (message("/top@other_bot"), "a command for another bot"),
        (message("/ban"), "not a command of this game"),
        (message("good game 😀"), "conversation"),
        (message("   "), "not a text message"),
    ],
)  # fmt: skip
def test_ignored_by_rule(update: dict[str, Any], reason: str) -> None:
    assert meaning(update, BOT) == Ignored(reason)


def test_the_service_messages_of_an_upgrade_mean_the_move_whoever_sent_them() -> None:
    old = {"id": -4518810793, "type": "group", "title": "Fans"}
    new = {"id": -1002471352452, "type": "supergroup", "title": "Fans"}
    moved = Upgraded(-4518810793, -1002471352452)
    assert meaning(message(chat=old, migrate_to_chat_id=new["id"]), BOT) == moved
    assert meaning(message(chat=new, migrate_from_chat_id=old["id"]), BOT) == moved
    anonymous = {"id": 1087968824, "is_bot": True, "first_name": "Group"}  # GroupAnonymousBot
    for sender in (None, anonymous):
        assert meaning(message(chat=new, sender=sender, migrate_from_chat_id=old["id"]),
                       BOT) == moved  # fmt: skip
    for odd in ({"migrate_to_chat_id": "-100"}, {"migrate_to_chat_id": True},
                {"migrate_from_chat_id": new["id"]}):  # fmt: skip
        assert isinstance(meaning(message(chat=new, **odd), BOT), Ignored)
    assert chat_of(message(chat=old, migrate_to_chat_id=new["id"])) == old["id"]  # its lane


def test_a_message_in_a_forum_topic_names_its_thread() -> None:
    forum = {**GROUP, "is_forum": True}
    in_topic = message("/top", chat=forum, message_thread_id=7, is_topic_message=True)
    assert meaning(in_topic, BOT) == Command(Chat(-100123, "Emoji Fans", False, 7), WHO, "top")
    # A reply in a group without topics has a thread of replies, not a topic: none.
    for more in ({"message_thread_id": 7}, {"message_thread_id": 0, "is_topic_message": True},
                 {"message_thread_id": "7", "is_topic_message": True}, {}):  # fmt: skip
        assert meaning(message("/top", chat=forum, **more), BOT) == Command(WHERE, WHO, "top")


def test_a_private_chat_gets_help_whatever_it_says() -> None:
    private = {"id": 42, "type": "private", "first_name": "Alice"}
    for text in ("/start", "/round", "😀😂😍😎🤔😴", "hello"):
        assert meaning(message(text, chat=private), BOT) == Command(
            Chat(42, "Alice", True), WHO, "help"
        )


def test_names_and_titles_are_cleaned_for_the_game() -> None:
    forged = {"id": 5, "first_name": "Eve\nAdmin: you won", "last_name": "\u202e" + "x" * 80}
    name = display_name(forged)
    assert check_label("name", name, MAX_NAME) == name
    assert "\n" not in name and "\u202e" not in name and len(name) == MAX_NAME
    assert display_name({"id": 5, "first_name": "\u200b\u200b", "username": "eve"}) == "eve"
    assert display_name({"id": 5, "first_name": "\x00"}) == "player 5"
    title = meaning(message("/top", chat={"id": -1, "type": "group", "title": "\n"}), BOT)
    assert isinstance(title, Command) and title.chat.title == "chat -1"


@given(st.text(), st.integers(1, MAX_TITLE))
def test_a_cleaned_label_is_always_accepted(text: str, limit: int) -> None:
    cleaned = clean_label(text, limit, "fallback")
    assert check_label("label", cleaned, limit) == cleaned


def test_the_lane_and_the_id_of_an_update() -> None:
    assert chat_of(message("x")) == -100123
    assert chat_of({"update_id": 1, "edited_message": {"chat": {"id": 5}}}) == 5
    assert chat_of({"update_id": 1, "callback_query": {}}) is None
    assert update_id_of({"update_id": 0}) == 0
    for bad in ({}, {"update_id": "1"}, {"update_id": True}, {"update_id": -1}):
        with pytest.raises(ValueError, match="update_id"):
            update_id_of(bad)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                 max_size=3),
    max_leaves=8,
)  # fmt: skip
PARTS = {"from": st.fixed_dictionaries({"id": st.integers() | JSON, "is_bot": JSON}) | JSON,
         "chat": st.fixed_dictionaries({"id": st.integers() | JSON, "type": JSON,
                                        "title": JSON}) | JSON,
         "text": st.text() | JSON, "migrate_to_chat_id": st.integers() | JSON,
         "migrate_from_chat_id": st.integers() | JSON, "message_thread_id": st.integers() | JSON,
         "is_topic_message": JSON}  # fmt: skip


@given(st.sampled_from(["message", "edited_message", "other"]),
       st.fixed_dictionaries({}, optional=PARTS))  # fmt: skip
def test_any_update_has_a_meaning_and_never_raises(kind: str, body: dict[str, Any]) -> None:
    update = {"update_id": 1, kind: body}
    assert isinstance(meaning(update, BOT), Command | Guess | Upgraded | Ignored)
    chat_of(update)
