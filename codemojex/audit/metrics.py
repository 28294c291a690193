"""The archive's Prometheus metrics, read from an ``Archiver``'s ``statistics()`` at each scrape
(``codemojex.metrics.ServiceMetrics`` serves them at ``/metrics``):
``codemojex_archive_rows_total`` (rows archived), ``codemojex_archive_resent_total`` (notices
delivered again though the archive had them delivered), ``codemojex_archive_segments_total``
(segments replicated), ``codemojex_archive_fenced`` (1 when another archiver took over),
``codemojex_archive_replica_up`` (0 during an outage) and
``codemojex_archive_replica_errors_total``."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from codemojex.audit.archiver import Archiver

__all__ = ["ArchiveCollector"]


class ArchiveCollector(Collector):
    """An archiver's statistics, as of the collection; nothing until it ``watch``\\es one."""

    def __init__(self) -> None:
        self.archiver: Archiver | None = None

    def watch(self, archiver: Archiver) -> None:
        self.archiver = archiver

    def collect(self) -> Iterator[Metric]:
        if self.archiver is None:
            return
        a = self.archiver.statistics()
        r = a.replicator
        yield CounterMetricFamily(
            "codemojex_archive_rows", "Rows the archiver inserted.", value=a.folder.archived
        )
        yield CounterMetricFamily(
            "codemojex_archive_resent",
            "Deliveries of notices the archive had recorded as delivered before (sent again).",
            value=a.folder.resent,
        )
        yield CounterMetricFamily(
            "codemojex_archive_segments", "Segments the archiver replicated.", value=r.segments
        )
        yield GaugeMetricFamily(
            "codemojex_archive_fenced",
            "1 when another archiver holds the archive's epoch (this one stopped writing).",
            value=int(r.fenced is not None),
        )
        yield GaugeMetricFamily(
            "codemojex_archive_replica_up",
            "0 while the replica is unreachable, else 1.",
            value=int(r.replica_down_since is None),
        )
        yield CounterMetricFamily(
            "codemojex_archive_replica_errors", "Failed calls to the replica.",
            value=r.replica_errors,
        )  # fmt: skip
