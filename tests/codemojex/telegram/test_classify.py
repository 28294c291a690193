import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from codemojex.telegram.classify import (
    Delivered,
    Drop,
    Fatal,
    Garbled,
    Migrate,
    RetryLater,
    classify,
    classify_error,
    is_bot_api,
)

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
# Answers shaped as the Bot API's: "ok" a bool, the other fields anything at all.
BOT_API = st.fixed_dictionaries(
    {"ok": st.booleans()},
    optional={"result": JSON, "error_code": JSON, "description": JSON,
              "parameters": JSON | st.fixed_dictionaries({}, optional={
                  "retry_after": JSON, "migrate_to_chat_id": JSON})},
)  # fmt: skip
STATUS = st.integers(100, 599)


def err(code: int, description: str, **params: object) -> dict[str, object]:
    body: dict[str, object] = {"ok": False, "error_code": code, "description": description}
    if params:
        body["parameters"] = params
    return body


def test_delivered_with_message_id() -> None:
    assert classify(200, {"ok": True, "result": {"message_id": 7}}) == Delivered(7)


def test_429_honours_retry_after_and_is_a_flood_wait() -> None:
    v = classify(429, err(429, "Too Many Requests: retry after 2", retry_after=2))
    assert v == RetryLater("Too Many Requests: retry after 2", 2000, flood=True)


def test_429_without_parameters_still_waits() -> None:
    v = classify(429, err(429, "Too Many Requests"))
    assert isinstance(v, RetryLater) and v.flood and v.delay_ms == 1000


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_5xx_retries(status: int) -> None:
    v = classify(status, err(status, "Internal Server Error"))
    assert isinstance(v, RetryLater) and not v.flood


def test_5xx_with_html_body_retries() -> None:
    assert isinstance(classify(502, None), RetryLater)


def test_migrate_reads_parameters() -> None:
    v = classify(400, err(400, "Bad Request: group chat was upgraded to a supergroup chat",
                          migrate_to_chat_id=-1001234))  # fmt: skip
    assert v == Migrate(-1001234, "Bad Request: group chat was upgraded to a supergroup chat")


@pytest.mark.parametrize(
    ("status", "description"),
    [
        (403, "Forbidden: bot was blocked by the user"),
        (403, "Forbidden: user is deactivated"),
        (403, "Forbidden: bot was kicked from the group chat"),
        (403, "Forbidden: bot can't initiate conversation with a user"),
        (403, "Forbidden: the group chat was deleted"),
        (403, "Forbidden: bot can't send messages to bots"),
        (403, "Forbidden: the bot can't send messages to the bot"),
        (403, "Forbidden: bot was kicked from the supergroup chat"),
        (403, "Forbidden: bot is not a member of the channel chat"),
        (403, "Forbidden: CHAT_WRITE_FORBIDDEN"),
        (403, "Forbidden: not enough rights to send text messages to the chat"),
        (400, "Bad Request: need administrator rights in the channel chat"),
        (400, "Bad Request: TOPIC_CLOSED"),
        (400, "Bad Request: text is too long"),
        (400, "Bad Request: chat not found"),
        (400, "Bad Request: message is too long"),
        (400, "Bad Request: can't parse entities: Unsupported start tag"),
        (400, "Bad Request: something new and odd"),
    ],
)
def test_permanent_errors_drop_with_their_reason(status: int, description: str) -> None:
    assert classify(status, err(status, description)) == Drop(description)


def test_unknown_403_is_retried_not_dropped() -> None:
    v = classify(403, err(403, "Forbidden: bot can't send messages to the user right now"))
    assert isinstance(v, RetryLater)


@pytest.mark.parametrize(
    ("status", "description", "words"),
    [
        (401, "Unauthorized", "token"),
        (404, "Not Found", "token"),
        (409, "Conflict: terminated by other getUpdates request", "another instance"),
    ],
)
def test_fatal(status: int, description: str, words: str) -> None:
    v = classify(status, err(status, description))
    assert isinstance(v, Fatal) and words in v.reason


def test_parameters_win_over_status() -> None:
    # A 400 that carries retry_after is still a wait, as the mature libraries read it.
    v = classify(400, err(400, "Bad Request: slow down", retry_after=3))
    assert isinstance(v, RetryLater) and v.delay_ms == 3000


def test_network_errors_retry() -> None:
    v = classify_error(httpx.ConnectTimeout("timed out"))
    assert isinstance(v, RetryLater) and "ConnectTimeout" in v.reason and not v.flood


@given(STATUS, JSON.filter(lambda body: not is_bot_api(body)))
def test_an_answer_that_is_not_the_bot_api_s_is_retried_as_a_5xx_whatever_its_status(
    status: int, body: object
) -> None:
    verdict = classify(status, body)
    assert isinstance(verdict, RetryLater)
    if status == 429:  # a proxy's rate limit: a flood wait, never an attempt either
        assert verdict.flood and not verdict.server
    else:
        assert verdict.server and not verdict.flood and verdict.answered
        assert verdict.cause == ("server_error" if status >= 500 else "not_bot_api")
    assert verdict.reason.startswith(f"HTTP {status} ")
    assert classify(status, Garbled(status, "x")) == attrs_evolve_reason(verdict, status)


def attrs_evolve_reason(verdict: RetryLater, status: int) -> RetryLater:
    """``verdict`` as ``Garbled(status, "x")`` reads: the same but for what it was."""
    return RetryLater(f"{verdict.reason.partition(': ')[0]}: x", verdict.delay_ms,
                      verdict.flood, verdict.server, verdict.answered, verdict.garbled)  # fmt: skip


@given(STATUS, BOT_API)
def test_every_answer_of_the_bot_api_s_shape_is_read_and_never_taken_for_garbage(
    status: int, body: dict[str, object]
) -> None:
    verdict = classify(status, body)  # never raises, whatever the fields hold
    assert isinstance(verdict, Delivered | RetryLater | Migrate | Drop | Fatal)
    assert not (isinstance(verdict, RetryLater) and verdict.garbled)


@pytest.mark.parametrize(
    ("body", "what"),
    [
        (None, "not JSON"),
        ([], "JSON but not the Bot API's (an array)"),
        ("ok", "JSON but not the Bot API's (a string)"),
        (7, "JSON but not the Bot API's (a number)"),
        ({"result": {"message_id": 1}}, 'JSON but not the Bot API\'s (an object without "ok")'),
        ({"ok": "true"}, 'JSON but not the Bot API\'s (an object without "ok")'),
    ],
)
def test_a_200_that_is_not_the_bot_api_s_says_what_it_was_and_is_never_delivered(
    body: object, what: str
) -> None:
    assert classify(200, body) == RetryLater(f"HTTP 200 OK: {what}", server=True, garbled=True)
