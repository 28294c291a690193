"""The notifications' metrics that need no service (``codemojex.notify.metrics``, pure): the send
window's rate, and the delivery delay by chat type. ``tests/codemojex/test_metrics.py`` scrapes
the rest from a running worker."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from codemojex.notify.metrics import NotifyMetrics, SendWindow
from codemojex.notify.notice import Notice
from echomq_trio.metrics import BusMetrics
from tests.support import parse, value


def test_the_send_window_rates_over_about_its_window() -> None:
    window = SendWindow(60)
    assert window.rate(0, 0) == 0.0
    assert window.rate(10, 30) == 3.0  # early on: since the first sample
    for t in range(11, 200):
        window.rate(t, 30 + (t - 10) * 2)  # 2 per second from t = 10
    assert window.rate(200, 30 + 190 * 2) == 2.0


def test_delay_counts_from_the_due_time_else_the_mint_time() -> None:
    registry = CollectorRegistry()
    delays = NotifyMetrics(registry, BusMetrics(registry))
    delays.delivered(Notice(1, "x", id="NOT0000000000A"), 1, now_ms=10**13)
    delays.delivered(Notice(-5, "x", due_ms=1_000), -5, now_ms=3_500)
    delays.delivered(Notice(-5, "x", due_ms=9_000), -5, now_ms=3_500)  # early: 0
    delays.delivered(Notice(1, "x"), 1, now_ms=3_500)  # no id, no due time: not observed
    got = parse(generate_latest(registry).decode())
    assert value(got, "codemojex_notice_delay_seconds_count", chat_type="private") == 1
    assert value(got, "codemojex_notice_delay_seconds_count", chat_type="group") == 2
    assert value(got, "codemojex_notice_delay_seconds_sum", chat_type="group") == 2.5
