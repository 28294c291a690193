import pytest
from hypothesis import given
from hypothesis import strategies as st

from codemojex.game.scoring import ALPHABET, MAX_TOTAL, SIZE, parse_emojis, score, status_word

secrets = st.permutations(ALPHABET).map(lambda p: list(p[:SIZE]))
guesses = st.lists(st.sampled_from(ALPHABET), min_size=SIZE, max_size=SIZE)


@given(secrets)
def test_a_perfect_guess_is_100_percent(secret: list[str]) -> None:
    s = score(secret, secret)
    assert (s.total, s.percentage) == (600, 100)
    assert all(p.status == "EXACT" for p in s.breakdown)


@given(secrets)
def test_six_misses_are_0_percent(secret: list[str]) -> None:
    misses = [e for e in ALPHABET if e not in secret][:SIZE]
    s = score(secret, misses)
    assert (s.total, s.percentage) == (0, 0)
    assert [p.status for p in s.breakdown] == ["MISS"] * SIZE


@given(secrets, guesses)
def test_total_is_bounded_and_percentage_consistent(secret: list[str], guess: list[str]) -> None:
    s = score(secret, guess)
    assert 0 <= s.total <= MAX_TOTAL
    assert s.total == sum(p.points for p in s.breakdown)
    assert s.percentage == round(s.total / 600 * 100)
    assert s.total % 20 == 0  # so the percentage never lands on .5


def test_distance_scoring_and_status_words() -> None:
    secret = list("😀😂😍😎🤔😴")
    s = score(secret, list("😂😀😎😴😍🐶"))
    assert [p.points for p in s.breakdown] == [80, 80, 80, 60, 60, 0]
    assert [p.status for p in s.breakdown] == ["ADJACENT", "ADJACENT", "ADJACENT", "NEAR", "NEAR",
                                                "MISS"]  # fmt: skip
    far = score(secret, list("😴🐶🐱🦊🐼😀"))
    assert [p.distance for p in far.breakdown[:1]] == [5] and far.breakdown[0].status == "MAX"
    assert status_word(4) == "FAR" and status_word(3) == "NEAR" and status_word(0) == "EXACT"


def test_parse_guesses() -> None:
    assert parse_emojis("😀 😂 😍 😎 🤔 😴") == list("😀😂😍😎🤔😴")
    assert parse_emojis(["😀", "😂", "😍", "😎", "🤔", "😴\ufe0f"]) == list("😀😂😍😎🤔😴")
    with pytest.raises(ValueError, match="exactly 6"):
        parse_emojis("😀😂😍")
    with pytest.raises(ValueError, match="not one of the game's emojis"):
        parse_emojis("😀😂😍😎🤔x")


def test_secret_must_be_six_distinct() -> None:
    with pytest.raises(ValueError):
        score(list("😀😀😍😎🤔😴"), list("😀😂😍😎🤔😴"))
