import httpx
import pytest

from codemojex.notify.classify import (
    Delivered,
    Drop,
    Fatal,
    Migrate,
    RetryLater,
    classify,
    classify_error,
)


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
