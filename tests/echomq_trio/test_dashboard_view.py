"""The dashboard's view model, without a server: throughput from running totals, charts of
numbers only, lane states in words, names paged by cursor, and the page's query checked."""

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from echomq_trio.dashboard import view
from echomq_trio.results import Counts, LaneStatus

NOW = 1_796_035_496_083


def _counts(completed: int, retried: int = 0, dead: int = 0) -> Counts:
    return Counts(True, 1, 2, 3, dead, 0, 0, 0, completed, retried, dead, 0, 0)


def test_throughput_is_the_growth_of_the_totals_between_samples() -> None:
    history = view.History(keep=3)
    for i, done in enumerate([10, 15, 15, 40]):  # four samples, three kept
        history.add("q", NOW + i * 60_000, _counts(done, retried=i))
    row = view.queue_row("q", history, 60.0)
    assert history.totals("q", "completed_total") == [15, 15, 40]
    assert row["done_per_min"] == 12.5 and row["retries_per_min"] == 1.0
    assert row["counts"]["pending"] == 1 and row["window"] == "2 min"
    assert row["counts"]["expired_total"] == 0
    history.add("q", NOW + 4 * 60_000, attrs.evolve(_counts(40), waiting_children=2))
    assert view.queue_row("q", history, 60.0)["counts"]["waiting_children"] == 2
    history.retain(["other"])
    assert history.latest("q") is None


def test_a_total_that_falls_counts_as_no_growth() -> None:
    assert view.deltas([5, 3, 4]) == [0, 1]


@given(st.lists(st.integers(min_value=0, max_value=10**9), max_size=80))
def test_sparkline_holds_only_numbers(values: list[int]) -> None:
    svg = view.sparkline(values)
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    points = svg.split('points="')[2].split('"')[0]
    assert all(c in "0123456789., -" for c in points)


def test_lanes_say_their_state_in_words() -> None:
    def lane(**kw: object) -> LaneStatus:
        fields = {"group": "g", "depth": 1, "in_flight": 0, "limit": None, "weight": 1,
                  "paused": False, "wait_until_ms": None, "on_ring": False} | kw  # fmt: skip
        return LaneStatus(**fields)  # type: ignore[arg-type]

    assert view.lane_row(lane(paused=True), NOW)["state"] == "paused"
    waiting = view.lane_row(lane(wait_until_ms=NOW + 90_000), NOW)["state"]
    assert waiting == "waiting until 2026-11-30T10:46:26Z (in 1 min 30 s)"
    assert view.lane_row(lane(limit=1, in_flight=1), NOW)["state"] == "at its limit"
    assert view.lane_row(lane(on_ring=True), NOW)["state"] == "served"
    assert view.lane_row(lane(), NOW)["state"] == "idle"


def test_names_are_paged_by_cursor() -> None:
    names = ["a", "b", "c", "d", "e"]
    assert view.name_page(names, "", 2) == (["a", "b"], "b")
    assert view.name_page(names, "b", 2) == (["c", "d"], "d")
    assert view.name_page(names, "d", 2) == (["e"], None)
    assert view.name_page(names, "bb", 2) == (["c", "d"], "d")  # a cursor that went away
    assert view.name_page([], "", 2) == ([], None)


def test_the_query_is_read_or_refused_with_the_reason() -> None:
    assert view.parse_query(b"") == view.Query()
    q = view.parse_query(b"queue=mail&lanes_after=100:chat-2&dead=40&count=5")
    assert (q.queue, q.lanes_after, q.dead, q.count) == ("mail", "100:chat-2", 40, 5)
    for query, reason in {
        b"dead=-1": "dead must be a whole number",
        b"count=0": "count must be 1-100",
        b"queue=a%20b": "queue name",
        b"lanes_after=chat-1": "lane page cursor",
        b"queue=a&queue=b": "given twice",
        b"x=1": "unknown parameter 'x'",
        b"\xff": "ASCII",
    }.items():
        with pytest.raises(ValueError, match=reason):
            view.parse_query(query)


lane_cursors = st.one_of(
    st.just(""),
    st.builds(
        lambda n, g: f"{n}:{g}", st.integers(0, 2**32), st.sampled_from(["", "chat-7", "a:b"])
    ),
)


@given(st.integers(0, 999), lane_cursors)
def test_a_partitioned_queue_s_lane_cursor_names_its_partition(i: int, cursor: str) -> None:
    joined = view.join_lane_cursor(i, cursor)
    assert view.split_lane_cursor(joined) == (i, cursor)
    assert view.parse_query(f"lanes_after={joined}".encode()).lanes_after == joined
    if i == 0:
        assert joined == cursor, "a plain queue's cursors are lanes.status_page's own"


def test_a_bad_partitioned_lane_cursor_is_refused() -> None:
    for bad in ("p1/nope", "p0/1:", "p/1:", "p01/1:"):
        with pytest.raises(ValueError, match="lane page cursor"):
            view.split_lane_cursor(bad)
