"""The audit archive: every settled notice, kept off the hot path and off-box.

How the parts fit: the script that settles a notice appends its record to the queue's audit
stream. The ``Archiver`` (``archiver``) folds the records into a local SQLite ``archive`` and
replicates its rows create-only, in numbered segments, to a ``replica`` (a directory or S3).
``restore`` rebuilds a database from the replica. ``python -m codemojex.audit`` queries,
checks and restores archives, or runs an archiver.
"""

from codemojex.audit.archive import (
    OUTCOMES,
    ArchiveDB,
    ArchiveStore,
    AuditRow,
    NotAnArchive,
    fold,
    read_archive,
)
from codemojex.audit.archiver import Archiver, ArchiverStats, restore, segment_name
from codemojex.audit.replica import (
    DirectoryReplica,
    NameTaken,
    Replica,
    ReplicaBusy,
    S3Replica,
    open_replica,
)

__all__ = [
    "OUTCOMES",
    "ArchiveDB",
    "ArchiveStore",
    "Archiver",
    "ArchiverStats",
    "AuditRow",
    "DirectoryReplica",
    "NameTaken",
    "NotAnArchive",
    "Replica",
    "ReplicaBusy",
    "S3Replica",
    "fold",
    "open_replica",
    "read_archive",
    "restore",
    "segment_name",
]
