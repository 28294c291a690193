"""Chat ids as the Bot API numbers them (pure): what an id says of its chat, and the check that
refuses an id no chat has."""

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from codemojex.telegram import chat_kind, check_chat_id, check_user_id, is_group_chat
from codemojex.telegram.chats import MAX_BASIC_GROUP_ID, MAX_USER_ID, MIN_CHANNEL_ID

EDGES = [
    (1, "private"),
    ((1 << 40) - 1, "private"),
    (1 << 40, None),
    (0, None),
    (-1, "group"),
    (-100200, "group"),
    (-999_999_999_999, "group"),
    (-1_000_000_000_000, None),
    (-1_000_000_000_001, "supergroup"),
    (-1_001_234_567_890, "supergroup"),
    (-1_997_852_516_352, "supergroup"),
    (-1_997_852_516_353, None),
]


@pytest.mark.parametrize(("chat_id", "kind"), EDGES)
def test_kind_by_id_range(chat_id: int, kind: str | None) -> None:
    assert chat_kind(chat_id) == kind


@pytest.mark.parametrize(("chat_id", "kind"), EDGES)
def test_the_check_takes_exactly_the_ids_a_chat_has(chat_id: int, kind: str | None) -> None:
    if kind is None:
        with pytest.raises(ValueError, match="must be a Telegram chat id"):
            check_chat_id(chat_id)
    else:
        assert check_chat_id(chat_id) == chat_id
    if kind == "private":
        assert check_user_id(chat_id) == chat_id
    else:
        with pytest.raises(ValueError, match="must be a Telegram user id"):
            check_user_id(chat_id)


CHAT_IDS = (
    st.integers(1, MAX_USER_ID)
    | st.integers(-MAX_BASIC_GROUP_ID, -1)
    | st.integers(MIN_CHANNEL_ID, -MAX_BASIC_GROUP_ID - 2)
)


@given(CHAT_IDS)
def test_every_id_in_the_ranges_is_a_chat(chat_id: int) -> None:
    assert check_chat_id(chat_id) == chat_id
    kind = "private" if chat_id > 0 else "group" if chat_id >= -MAX_BASIC_GROUP_ID else "supergroup"
    assert chat_kind(chat_id) == kind
    assert is_group_chat(chat_id) == (chat_id < 0)


@given(st.integers().filter(lambda n: chat_kind(n) is None))
def test_every_id_outside_them_is_refused_on_one_line(chat_id: int) -> None:
    with pytest.raises(ValueError) as refused:
        check_chat_id(chat_id, "a room's chat")
    text = str(refused.value)
    assert "\n" not in text
    assert text.startswith("a room's chat must be a Telegram chat id")
    assert text.endswith(f"got {chat_id!r}")


@pytest.mark.parametrize("value", [True, False, 1.0, "5", None, [5]])
def test_what_is_not_an_int_is_no_chat_id(value: object) -> None:
    with pytest.raises(ValueError, match=re.escape(f"got {value!r}")):
        check_chat_id(value)
    with pytest.raises(ValueError, match=re.escape(f"got {value!r}")):
        check_user_id(value)
