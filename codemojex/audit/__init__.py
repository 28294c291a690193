"""The audit archive: every settled notice, kept off the hot path and off-box.

How the parts fit: the script that settles a notice appends its record to the queue's audit
stream. The ``Archiver`` (``archiver``) runs two tasks: the ``Folder`` (``folder``) folds the
records into ``AuditRow``s (``rows``, pure) in a local SQLite ``archive`` (on one ``dedicated``
thread), acknowledges and trims the stream; the ``Replicator`` (``replicator``) claims an epoch
in a ``replica`` (a directory or S3) and writes the committed rows to it create-only, in
numbered segments whose format ``segments`` (pure) writes and reads, and compacts them into
larger objects under numbered manifests by the rules of ``compaction`` (pure), reading the
replica through ``contents``; its ``restore`` rebuilds a database from the newest manifest and
the segments after it. The ``Ledger`` (``ledger``) reads the archive for the notification
worker after a repair or restore of the server's data, so that a notice the archive records as
delivered is not sent again. ``python -m codemojex.audit`` queries, checks and restores
archives, or runs an archiver.
"""

from codemojex.audit.archive import ArchiveDB, ArchiveStore, NotAnArchive, read_archive
from codemojex.audit.archiver import Archiver, ArchiverStats
from codemojex.audit.folder import Folder, FolderStats
from codemojex.audit.ledger import ArchivedDelivery, Ledger, LedgerStats
from codemojex.audit.replica import (
    DirectoryReplica,
    NameTaken,
    NoSuchName,
    Replica,
    ReplicaBusy,
    S3Replica,
    S3Unavailable,
    check_replica,
    open_replica,
)
from codemojex.audit.replicator import DEFAULT_REPLICA_RETRY, Replicator, ReplicatorStats, restore
from codemojex.audit.rows import OUTCOMES, AuditRow, fold

__all__ = [
    "DEFAULT_REPLICA_RETRY",
    "OUTCOMES",
    "ArchiveDB",
    "ArchiveStore",
    "ArchivedDelivery",
    "Archiver",
    "ArchiverStats",
    "AuditRow",
    "DirectoryReplica",
    "Folder",
    "FolderStats",
    "Ledger",
    "LedgerStats",
    "NameTaken",
    "NoSuchName",
    "NotAnArchive",
    "Replica",
    "ReplicaBusy",
    "Replicator",
    "ReplicatorStats",
    "S3Replica",
    "S3Unavailable",
    "check_replica",
    "fold",
    "open_replica",
    "read_archive",
    "restore",
]
