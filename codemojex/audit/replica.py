"""Where archive segments go off-box, written create-only: a local directory (by default) or
S3-compatible storage. ``put_new`` never overwrites: if the name exists it raises
``NameTaken`` (S3's 412 Precondition Failed to ``If-None-Match: *``), which is how two writers
learn that one of them must stop. S3's 409 (a concurrent conditional write) raises
``ReplicaBusy``: try again. ``put_new_file`` is ``put_new`` from a file and ``reader`` a
``get`` that streams: large objects (compaction's) never have to be in memory whole. ``get``
(or ``reader``) of a name that is not there raises ``NoSuchName``; ``delete`` removes names
(compaction's clean-up; a missing name is no error). Blocking; callers use ``trio.to_thread``.

Every other failure (unreachable, refused credentials, a missing bucket: ``OSError`` or boto's
errors) is the caller's to retry; an S3 client gives up on a call within seconds (short
timeouts, one retry of its own) so the caller's backoff decides how often to try.

Specs for ``open_replica``: a path or ``dir:PATH``; ``s3://BUCKET/PREFIX`` with credentials from
the usual AWS environment variables and ``?endpoint=URL`` (or ``CODEMOJEX_S3_ENDPOINT``) for a
non-AWS server.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Protocol
from urllib.parse import parse_qs, urlsplit

from servicekit.datadir import private_dir

__all__ = [
    "DirectoryReplica",
    "NameTaken",
    "NoSuchName",
    "Readable",
    "Replica",
    "ReplicaBusy",
    "S3Replica",
    "S3Unavailable",
    "check_replica",
    "open_replica",
]

S3_DELETE_MAX = 1000  # keys per DeleteObjects request


class NameTaken(Exception):
    """The name exists already: another writer owns it."""


class ReplicaBusy(Exception):
    """A concurrent conditional write got in the way; retry."""


class NoSuchName(Exception):
    """The name is not there (deleted since it was listed): list again."""


class Readable(Protocol):
    """What ``reader`` yields: an object's bytes, read a part at a time."""

    def read(self, size: int, /) -> bytes: ...


class Replica(Protocol):
    def put_new(self, name: str, data: bytes) -> None: ...
    def put_new_file(self, name: str, file: BinaryIO) -> None: ...
    def get(self, name: str) -> bytes: ...
    def reader(self, name: str) -> AbstractContextManager[Readable]: ...
    def names(self, prefix: str) -> list[str]: ...
    def delete(self, names: Sequence[str]) -> None: ...
    def describe(self) -> str: ...


class DirectoryReplica:
    """A directory; each object is a file published atomically and exclusively (``link``).

    A missing root is created readable by its owner only (0700), unless ``create=False`` (a
    reader: a missing root then just has no objects)."""

    def __init__(self, root: str | Path, *, create: bool = True) -> None:
        self.root = Path(root).resolve()
        if create and not self.root.exists():
            private_dir(self.root)

    def describe(self) -> str:
        return f"dir:{self.root}"

    def put_new(self, name: str, data: bytes) -> None:
        self._publish(name, lambda f: f.write(data))

    def put_new_file(self, name: str, file: BinaryIO) -> None:
        """``put_new`` of ``file``'s bytes, from its start (copied a part at a time)."""
        file.seek(0)
        self._publish(name, lambda f: shutil.copyfileobj(file, f))

    def _publish(self, name: str, write: Callable[[BinaryIO], object]) -> None:
        final = self.root / name
        final.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=final.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, final)  # fails if the name exists: create-only
            except FileExistsError:
                raise NameTaken(f"{name} exists in {self.describe()}") from None
            dir_fd = os.open(final.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        finally:
            os.unlink(tmp)

    def get(self, name: str) -> bytes:
        try:
            return (self.root / name).read_bytes()
        except FileNotFoundError:
            raise NoSuchName(f"{name} is not in {self.describe()}") from None

    @contextmanager
    def reader(self, name: str) -> Iterator[Readable]:
        try:
            f = (self.root / name).open("rb")
        except FileNotFoundError:
            raise NoSuchName(f"{name} is not in {self.describe()}") from None
        with f:
            yield f

    def names(self, prefix: str) -> list[str]:
        folder = self.root / prefix
        if not folder.is_dir():
            return []
        return sorted(prefix + p.name for p in folder.iterdir() if not p.name.startswith("."))

    def delete(self, names: Sequence[str]) -> None:
        for name in names:
            (self.root / name).unlink(missing_ok=True)


class S3Unavailable(Exception):
    """An ``s3://`` replica was named and boto3 cannot be imported: install it
    (``pip install 'codemojex[s3]'``) or name a directory instead. The message says so in one
    line."""


def _boto3(spec: str) -> Any:
    try:
        import boto3
    except ImportError as exc:
        raise S3Unavailable(
            f"the replica {spec} needs boto3, which cannot be imported ({exc}): install it with "
            "pip install 'codemojex[s3]', or name a directory as the replica"
        ) from None
    return boto3


def check_replica(spec: str) -> None:
    """What ``open_replica(spec)`` would refuse, found without touching anything: ``ValueError``
    for a bad spec, ``S3Unavailable`` for an ``s3://`` one without boto3."""
    if not spec:
        raise ValueError("replica spec is empty")
    if spec.startswith("s3://"):
        if not urlsplit(spec).netloc:
            raise ValueError(f"s3 replica needs a bucket: {spec!r}")
        _boto3(spec)
    elif "://" in spec:
        raise ValueError(f"replica must be a directory or s3://bucket/prefix, got {spec!r}")


class S3Replica:
    """A bucket and key prefix on S3-compatible storage (boto3; ``S3Unavailable`` without)."""

    def __init__(self, bucket: str, prefix: str = "", *, endpoint_url: str | None = None,
                 client: Any = None) -> None:  # fmt: skip
        boto3 = _boto3(f"s3://{bucket}/{prefix.strip('/')}")
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.endpoint_url = endpoint_url
        if client is None:
            from botocore.config import Config

            # Give up on a call within seconds: the archiver retries with its own backoff.
            config = Config(connect_timeout=5, read_timeout=30,
                            retries={"mode": "standard", "total_max_attempts": 2})  # fmt: skip
            client = boto3.client("s3", endpoint_url=endpoint_url, config=config)
        self.client = client

    def describe(self) -> str:
        where = f" at {self.endpoint_url}" if self.endpoint_url else ""
        return f"s3://{self.bucket}/{self.prefix}{where}"

    def put_new(self, name: str, data: bytes) -> None:
        self._put(name, data)

    def put_new_file(self, name: str, file: BinaryIO) -> None:
        """``put_new`` of ``file``'s bytes, from its start (boto streams it)."""
        file.seek(0)
        self._put(name, file)

    def _put(self, name: str, body: bytes | BinaryIO) -> None:
        from botocore.exceptions import ClientError

        try:
            self.client.put_object(Bucket=self.bucket, Key=self.prefix + name, Body=body,
                                   IfNoneMatch="*")  # fmt: skip
        except ClientError as exc:
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            code = exc.response.get("Error", {}).get("Code", "")
            if status == 412 or code == "PreconditionFailed":
                raise NameTaken(f"{name} exists in {self.describe()}") from None
            if status == 409 or code == "ConditionalRequestConflict":
                raise ReplicaBusy(f"{name}: concurrent write in {self.describe()}") from None
            raise

    def get(self, name: str) -> bytes:
        body = self._body(name)
        try:
            return bytes(body.read())
        finally:
            body.close()

    @contextmanager
    def reader(self, name: str) -> Iterator[Readable]:
        body = self._body(name)
        try:
            yield body
        finally:
            body.close()

    def _body(self, name: str) -> Any:
        """The object's streaming body (botocore's ``StreamingBody``); the caller closes it."""
        from botocore.exceptions import ClientError

        try:
            return self.client.get_object(Bucket=self.bucket, Key=self.prefix + name)["Body"]
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code", "") in ("NoSuchKey", "404"):
                raise NoSuchName(f"{name} is not in {self.describe()}") from None
            raise

    def delete(self, names: Sequence[str]) -> None:
        for start in range(0, len(names), S3_DELETE_MAX):
            keys = [{"Key": self.prefix + n} for n in names[start : start + S3_DELETE_MAX]]
            delete = {"Objects": keys, "Quiet": True}
            failed = self.client.delete_objects(Bucket=self.bucket, Delete=delete).get("Errors")
            if failed:
                why = f"{failed[0].get('Key')}: {failed[0].get('Code')}"
                raise OSError(f"{len(failed)} deletions failed in {self.describe()} ({why}, ...)")

    def names(self, prefix: str) -> list[str]:
        out: list[str] = []
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix + prefix):
            out += [obj["Key"][len(self.prefix) :] for obj in page.get("Contents", [])]
        return sorted(out)


def open_replica(spec: str, *, create: bool = True) -> Replica:
    """A replica from a spec (see the module docstring); ``ValueError`` for a bad one,
    ``S3Unavailable`` for an ``s3://`` one without boto3 (``check_replica``). ``create=False``
    for a reader: a missing directory is not created."""
    check_replica(spec)
    if spec.startswith("s3://"):
        parts = urlsplit(spec)
        query = parse_qs(parts.query)
        endpoint = query.get("endpoint", [os.environ.get("CODEMOJEX_S3_ENDPOINT", "")])[0] or None
        return S3Replica(parts.netloc, parts.path, endpoint_url=endpoint)
    return DirectoryReplica(spec.removeprefix("dir:"), create=create)
