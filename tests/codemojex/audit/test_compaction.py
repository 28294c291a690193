"""Compaction of the replica: the rules alone (pure), then the replicator on a real directory
and on a real S3 server (moto's, on loopback), without a bus: restore stays equal to the archive
row for row, nothing is ever overwritten, the object count stays bounded, a racing writer of the
same manifest loses cleanly, a stale archiver cannot compact, and a restore that meets a
clean-up starts again."""

from __future__ import annotations

import io
import itertools
import threading
import tracemalloc
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from codemojex.audit import segments
from codemojex.audit.archive import ArchiveDB, ArchiveStore
from codemojex.audit.compaction import Contents, garbage, next_manifest, tail_to_merge
from codemojex.audit.contents import build_compaction, read_contents
from codemojex.audit.replica import DirectoryReplica, NameTaken, NoSuchName, Readable, Replica
from codemojex.audit.replicator import Replicator, restore
from codemojex.audit.rows import AuditRow
from codemojex.audit.segments import Manifest, Piece
from echomq_trio import ids
from tests.support import wait_for

T = TypeVar("T")
BLOCKING = trio.CapacityLimiter(1)  # the tests' own sqlite3/boto3 calls, in a worker thread


async def off_thread(fn: Callable[..., T], *args: Any) -> T:
    return await trio.to_thread.run_sync(fn, *args, limiter=BLOCKING)


def audit_rows(n: int) -> list[AuditRow]:
    return [AuditRow(ids.generate("NOT"), ids.generate("JOB"), 100 + i % 7, "delivered", i, 1,
                     None, 1, 1_000 + i, f"text {i}") for i in range(n)]  # fmt: skip


# --- the rules (pure) ----------------------------------------------------------------------------


def piece(first: int, last: int, rows: int) -> Piece:
    return Piece(segments.compacted_name(first, last), first, last, rows)


def test_compacted_objects_grow_like_a_binary_counter() -> None:
    objects: tuple[Piece, ...] = ()
    sizes = []
    for n in range(1, 9):  # eight batches of 10 rows, one segment each
        merged = tail_to_merge(objects, 10, 1_000)
        rows = 10 + sum(p.rows for p in objects[len(objects) - merged :])
        first = objects[len(objects) - merged].first_segment if merged else n
        objects = (*objects[: len(objects) - merged], piece(first, n, rows))
        sizes.append([p.rows for p in objects])
    assert sizes == [[10], [20], [20, 10], [40], [40, 10], [40, 20], [40, 20, 10], [80]]
    # Within compact_rows only: a full object is left alone.
    assert tail_to_merge((piece(1, 8, 80),), 80, 100) == 0
    assert tail_to_merge((piece(1, 8, 80), piece(9, 9, 10)), 10, 100) == 1


def test_the_next_manifest_replaces_what_it_took_in() -> None:
    first = next_manifest(None, 1, 0, piece(1, 4, 40), 40)
    assert first == Manifest(1, 1, 4, 40, (piece(1, 4, 40),))
    second = next_manifest(first, 2, 0, piece(5, 6, 10), 50)
    assert second == Manifest(2, 2, 6, 50, (piece(1, 4, 40), piece(5, 6, 10)))
    third = next_manifest(second, 2, 1, piece(5, 8, 20), 60)
    assert third.objects == (piece(1, 4, 40), piece(5, 8, 20)) and third.manifest == 3


def test_clean_up_lags_one_manifest() -> None:
    m1 = Manifest(1, 1, 4, 40, (piece(1, 4, 40),))
    m2 = Manifest(2, 1, 6, 50, (piece(1, 4, 40), piece(5, 6, 10)))
    m3 = Manifest(3, 2, 8, 60, (piece(1, 4, 40), piece(5, 8, 20)))
    names = [*(segments.segment_name(n) for n in range(1, 10)), piece(1, 4, 40).name,
             piece(5, 6, 10).name, piece(5, 8, 20).name,
             segments.compacted_name(7, 9),  # a loser's object past the end: kept
             *(segments.manifest_name(n) for n in (1, 2, 3)),
             segments.epoch_name(1)]  # fmt: skip
    assert garbage(names, m1, None) == []  # one manifest: nothing goes yet
    # Manifest 2 written: what manifest 1 superseded goes (segments 1-4, manifests before 1).
    assert garbage(names, m2, m1) == [segments.segment_name(n) for n in range(1, 5)]
    # Manifest 3: segments 5-6, the object manifest 3 replaced, manifest 1.
    assert garbage(names, m3, m2) == [
        *(segments.segment_name(n) for n in range(1, 7)),
        segments.manifest_name(1),
    ]  # piece(5, 6) is still named by manifest 2, the one before the newest
    m4 = Manifest(4, 2, 9, 70, (piece(1, 4, 40), piece(5, 8, 20), piece(9, 9, 10)))
    assert piece(5, 6, 10).name in garbage(names, m4, m3)
    assert segments.compacted_name(7, 9) not in garbage(names, m3, m2)
    live = Contents(segments=tuple(segments.segment_name(n) for n in range(5, 10)), manifest=m3)
    assert live.live == (piece(1, 4, 40).name, piece(5, 8, 20).name, segments.segment_name(9))
    assert live.last_segment == 9 and live.covered == 8


class MemoryReplica:
    """Create-only objects in a dict: the rules' model of a replica (the real ones are tested
    below)."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.created: list[str] = []

    def put_new(self, name: str, data: bytes) -> None:
        if name in self.objects:
            raise NameTaken(name)
        self.objects[name] = data
        self.created.append(name)

    def put_new_file(self, name: str, file: BinaryIO) -> None:
        file.seek(0)
        self.put_new(name, file.read())

    def get(self, name: str) -> bytes:
        if name not in self.objects:
            raise NoSuchName(name)
        return self.objects[name]

    def reader(self, name: str) -> AbstractContextManager[Readable]:
        return io.BytesIO(self.get(name))

    def names(self, prefix: str) -> list[str]:
        return sorted(n for n in self.objects if n.startswith(prefix))

    def delete(self, names: Sequence[str]) -> None:
        for name in names:
            self.objects.pop(name, None)

    def describe(self) -> str:
        return "memory"


def live_rows(replica: Replica) -> list[tuple[int, AuditRow]]:
    return [r for n in read_contents(replica).live for r in segments.decode_rows(replica.get(n))]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 9), min_size=1, max_size=80), st.integers(1, 6),
       st.integers(1, 120))  # fmt: skip
def test_rounds_of_compaction_keep_every_row_and_stay_bounded(
    batches: list[int], compact_segments: int, compact_rows: int
) -> None:
    replica, written, seq = MemoryReplica(), [], 0
    rows = iter(audit_rows(sum(batches)))
    for n, size in enumerate(batches, 1):  # a segment of each size, compacted when due
        batch = [(seq := seq + 1, next(rows)) for _ in range(size)]
        replica.put_new(segments.segment_name(n), segments.encode(n, 1, batch))
        written += batch
        while len((contents := read_contents(replica)).after) >= compact_segments:
            built = build_compaction(replica, contents, 1, compact_rows)
            assert built is not None
            with built.file:
                replica.put_new_file(built.piece.name, built.file)
            replica.put_new(segments.manifest_name(built.manifest.manifest),
                            segments.encode_manifest(built.manifest))  # fmt: skip
            replica.delete(read_contents(replica, previous=True).garbage())
        assert live_rows(replica) == written  # restore reads every row, in order, once
    contents = read_contents(replica, previous=True)
    assert len(replica.created) == len(set(replica.created)), "a name was created twice"
    assert len(contents.manifests) <= 2
    if contents.manifest is not None:
        # What is left: what the newest and the one before name, and the segments after the
        # one before's end; nothing else.
        named = {p.name for m in (contents.manifest, contents.previous) if m for p in m.objects}
        assert set(contents.compacted) == named
        end = contents.previous.last_segment if contents.previous else 0
        assert all(segments.number(n) > end for n in contents.segments)
        # Neighbours: the first at least twice the second, or together over compact_rows.
        objects = contents.manifest.objects
        for a, b in itertools.pairwise(objects):
            assert a.rows >= 2 * b.rows or a.rows + b.rows > compact_rows, objects


def test_a_compaction_holds_a_chunk_in_memory_not_its_objects(tmp_path: Path) -> None:
    # A large compacted object and the segments that follow it: what build_compaction holds at
    # once (its peak of Python allocations) stays a few chunks, far below the object it writes.
    replica, seq, written = DirectoryReplica(tmp_path / "replica"), 0, []
    for n in range(1, 61):
        batch = [(seq := seq + 1, row) for row in audit_rows(500)]
        replica.put_new(segments.segment_name(n), segments.encode(n, 1, batch))
        written += batch
    first = build_compaction(replica, read_contents(replica), 1, 10**6, 30, tmp_path)
    assert first is not None and first.merged == 0
    with first.file:
        replica.put_new_file(first.piece.name, first.file)
    replica.put_new(segments.manifest_name(1), segments.encode_manifest(first.manifest))
    tracemalloc.start()
    try:
        built = build_compaction(replica, read_contents(replica), 1, 10**6, None, tmp_path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert built is not None and built.merged == 1  # it took the first object in
    with built.file:
        size = built.file.seek(0, io.SEEK_END)
        replica.put_new_file(built.piece.name, built.file)
    replica.put_new(segments.manifest_name(2), segments.encode_manifest(built.manifest))
    assert live_rows(replica) == written
    assert size > 96 * segments.CHUNK
    assert peak < 16 * segments.CHUNK, f"peak {peak} bytes for an object of {size}"


# --- the replicator on real replicas ------------------------------------------------------------


class Ledger:
    """A real replica, and a ledger of what is created in it: nothing may be created twice, and
    an object, while it exists, holds what it was created with."""

    def __init__(self, inner: Replica) -> None:
        self.inner = inner
        self.created: list[tuple[str, bytes]] = []
        self.deleted: list[str] = []
        self._lock = threading.Lock()

    def put_new(self, name: str, data: bytes) -> None:
        self.inner.put_new(name, data)  # raises NameTaken when it exists
        with self._lock:
            self.created.append((name, data))

    def put_new_file(self, name: str, file: BinaryIO) -> None:
        self.inner.put_new_file(name, file)  # raises NameTaken when it exists
        file.seek(0)
        with self._lock:
            self.created.append((name, file.read()))

    def get(self, name: str) -> bytes:
        return self.inner.get(name)

    def reader(self, name: str) -> AbstractContextManager[Readable]:
        return self.inner.reader(name)

    def names(self, prefix: str) -> list[str]:
        return self.inner.names(prefix)

    def delete(self, names: Sequence[str]) -> None:
        self.inner.delete(names)
        with self._lock:
            self.deleted += names

    def describe(self) -> str:
        return self.inner.describe()

    def check_nothing_overwritten(self) -> None:
        names = [name for name, _ in self.created]
        assert len(names) == len(set(names)), "a name was created twice"
        first = dict(self.created)
        for folder in (segments.SEGMENTS, segments.COMPACTED, segments.MANIFESTS):
            for name in self.inner.names(folder):
                assert self.inner.get(name) == first[name], f"{name} was overwritten"


def a_replica(where: str, tmp_path: Path, request: pytest.FixtureRequest) -> Replica:
    if where == "directory":
        return DirectoryReplica(tmp_path / "replica")
    replica: Replica = request.getfixturevalue("s3_replica")
    return replica


# A directory, and S3 (moto's server: a process of its own, so the server tier).
WHERE = ["directory", pytest.param("s3", marks=pytest.mark.server)]
FAST = {"segment_rows": 5, "segment_every_s": 0.01, "poll_s": 0.01}


@asynccontextmanager
async def replicating(
    replica: Replica, db: Path, *, new_db: bool = False, **kw: Any
) -> AsyncIterator[Replicator]:
    """A replicator running over the archive at ``db`` (opened here) until the block ends."""
    store = ArchiveStore(db)
    await store.open()
    replicator = Replicator(store, replica, **{"holder": "test", **FAST, **kw})
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(replicator.run, new_db=new_db))
            await wait_for(lambda: replicator.reconciled.is_set(), timeout=30)
            yield replicator
            nursery.cancel_scope.cancel()
    finally:
        await store.aclose()


async def fully_replicated(replicator: Replicator) -> bool:
    store = replicator.store
    return await store.max_seq() == int(await store.get_meta("replicated_seq", "0") or 0)


def archived(db: Path) -> list[tuple[int, AuditRow]]:
    archive = ArchiveDB(db)
    try:
        return archive.rows_after(0, 1_000_000)
    finally:
        archive.close()


def restored(replica: Replica, path: Path) -> list[tuple[int, AuditRow]]:
    restore(replica, path)
    return archived(path)


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.timeout_s(120)
async def test_compaction_keeps_restore_equal_to_the_archive_and_never_overwrites(
    where: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    ledger = Ledger(a_replica(where, tmp_path, request))
    db = tmp_path / "audit.sqlite"
    async with replicating(ledger, db, compact_segments=4, compact_rows=60) as replicator:
        rows = audit_rows(240)
        for start in range(0, len(rows), 12):  # rows settle in batches, segments follow
            await replicator.store.insert(rows[start : start + 12])
            await wait_for(partial(fully_replicated, replicator), timeout=30)
        # A notice settled again (replayed from the dead set) gets a newer row: order matters.
        again = [AuditRow(**{**rows[3].as_dict(), "outcome": "dead", "settled_ms": 99_999})]
        assert await replicator.store.insert(again) == 1
        await wait_for(partial(fully_replicated, replicator), timeout=30)
        await wait_for(lambda: replicator.statistics().compactions >= 8, timeout=30)

        async def settled_down() -> bool:  # no compaction due, the last one's clean-up done
            contents = await off_thread(read_contents, ledger)
            return len(contents.manifests) == 2 and len(contents.after) < 4

        await wait_for(settled_down, timeout=30)
        stats = replicator.statistics()
    assert stats.fenced is None and stats.compaction_stopped is None and stats.deleted > 0
    assert await off_thread(restored, ledger, tmp_path / "restored.sqlite") == archived(db)
    ledger.check_nothing_overwritten()
    contents = await off_thread(partial(read_contents, previous=True), ledger)
    assert stats.segments > 45 and stats.manifest == contents.manifest.manifest  # type: ignore[union-attr]
    # Bounded: at most 2 x compact_segments segments, two manifests, and the compacted objects
    # of the two newest manifests (at most 2 x 241 / 60 + log2(60) + 2 each).
    assert len(contents.segments) <= 2 * 4 and len(contents.manifests) == 2
    assert len(contents.compacted) <= 2 * (8 + 6 + 2)
    assert contents.objects < stats.segments / 2
    # A new host beside the compacted replica starts from it, row for row.
    async with replicating(ledger, tmp_path / "new.sqlite", new_db=True):
        pass
    assert archived(tmp_path / "new.sqlite") == archived(db)


class Gated:
    """A replica whose creation of a manifest waits at a gate the test opens: two compactors
    made to race for one manifest number, the order chosen by the test."""

    def __init__(self, inner: Replica) -> None:
        self.inner = inner
        self.waiting = threading.Event()  # a manifest's creation waits at the gate
        self.gate = threading.Event()

    def put_new(self, name: str, data: bytes) -> None:
        if name.startswith(segments.MANIFESTS):
            self.waiting.set()
            self.gate.wait(30)
        self.inner.put_new(name, data)

    def put_new_file(self, name: str, file: BinaryIO) -> None:
        self.inner.put_new_file(name, file)

    def get(self, name: str) -> bytes:
        return self.inner.get(name)

    def reader(self, name: str) -> AbstractContextManager[Readable]:
        return self.inner.reader(name)

    def names(self, prefix: str) -> list[str]:
        return self.inner.names(prefix)

    def delete(self, names: Sequence[str]) -> None:
        self.inner.delete(names)

    def describe(self) -> str:
        return self.inner.describe()


@pytest.mark.parametrize("winner", ["stale", "newer"])
@pytest.mark.parametrize("where", WHERE)
@pytest.mark.timeout_s(90)
async def test_a_racing_writer_of_the_same_manifest_loses_cleanly(
    where: str, winner: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    ledger = Ledger(a_replica(where, tmp_path, request))
    stale_side, newer_side = Gated(ledger), Gated(ledger)
    manual = {"compact_segments": 10**6}  # compaction only when the test says
    results: dict[str, int] = {}

    async def compact(name: str, replicator: Replicator) -> None:
        results[name] = await replicator.compact(force=True)

    try:
        async with (
            replicating(stale_side, tmp_path / "a.sqlite", holder="a", **manual) as stale,
            trio.open_nursery() as nursery,
        ):
            await stale.store.insert(audit_rows(23))
            await wait_for(partial(fully_replicated, stale))
            # The stale one (epoch 1) has checked the epochs and merged; it waits to write
            # manifest 1. Meanwhile a newer archiver claims epoch 2 and does the same.
            nursery.start_soon(compact, "stale", stale)
            await wait_for(stale_side.waiting.is_set)
            async with replicating(newer_side, tmp_path / "b.sqlite", holder="b",
                                   **manual) as newer:  # fmt: skip
                assert (stale.statistics().epoch, newer.statistics().epoch) == (1, 2)
                nursery.start_soon(compact, "newer", newer)
                await wait_for(newer_side.waiting.is_set)
                first, second = ("stale", "newer") if winner == "stale" else ("newer", "stale")
                sides = {"stale": stale_side, "newer": newer_side}
                sides[first].gate.set()
                await wait_for(lambda: first in results)
                sides[second].gate.set()
                await wait_for(lambda: second in results)
                newer_stats = newer.statistics()
            stale_stats = stale.statistics()
            nursery.cancel_scope.cancel()
    finally:
        stale_side.gate.set()
        newer_side.gate.set()
    assert results == {first: 1, second: 0}, "one writes manifest 1, the other loses"
    (name,) = await off_thread(ledger.names, segments.MANIFESTS)
    manifest = segments.decode_manifest(await off_thread(ledger.get, name))
    assert manifest.epoch == (1 if winner == "stale" else 2)
    ledger.check_nothing_overwritten()
    assert newer_stats.fenced is None, "the newer epoch is never fenced by the stale one"
    if winner == "newer":
        assert "manifest 1 is a newer archiver's (epoch 2)" in (stale_stats.fenced or "")
    assert stale_stats.deleted == 0, "a stale archiver deletes nothing"
    rows = await off_thread(restored, ledger, tmp_path / "restored.sqlite")
    assert rows == archived(tmp_path / "a.sqlite")


async def test_a_stale_archiver_cannot_compact(tmp_path: Path) -> None:
    ledger = Ledger(DirectoryReplica(tmp_path / "replica"))
    manual = {"compact_segments": 10**6}
    async with replicating(ledger, tmp_path / "a.sqlite", holder="a", **manual) as stale:
        await stale.store.insert(audit_rows(12))
        await wait_for(partial(fully_replicated, stale))
        async with replicating(ledger, tmp_path / "b.sqlite", holder="b", **manual):
            assert await stale.compact(force=True) == 0
    assert "a newer archiver holds epoch 2" in (stale.statistics().fenced or "")
    assert await off_thread(ledger.names, segments.MANIFESTS) == []
    assert await off_thread(ledger.names, segments.COMPACTED) == []
    assert ledger.deleted == []


class Paused:
    """A replica whose first read of a compacted object (``get`` or ``reader``) waits until the
    test lets it go."""

    def __init__(self, inner: Replica) -> None:
        self.inner = inner
        self.waiting = threading.Event()
        self.go = threading.Event()
        self.missing = 0  # reads of an object that was gone

    def _pause(self, name: str) -> None:
        if name.startswith(segments.COMPACTED) and not self.waiting.is_set():
            self.waiting.set()
            self.go.wait(30)

    def get(self, name: str) -> bytes:
        self._pause(name)
        try:
            return self.inner.get(name)
        except NoSuchName:
            self.missing += 1
            raise

    @contextmanager
    def reader(self, name: str) -> Iterator[Readable]:
        self._pause(name)
        try:
            with self.inner.reader(name) as f:
                yield f
        except NoSuchName:
            self.missing += 1
            raise

    def put_new(self, name: str, data: bytes) -> None:
        self.inner.put_new(name, data)

    def put_new_file(self, name: str, file: BinaryIO) -> None:
        self.inner.put_new_file(name, file)

    def names(self, prefix: str) -> list[str]:
        return self.inner.names(prefix)

    def delete(self, names: Sequence[str]) -> None:
        self.inner.delete(names)

    def describe(self) -> str:
        return self.inner.describe()


@pytest.mark.timeout_s(60)
async def test_a_restore_that_meets_a_clean_up_starts_again(tmp_path: Path) -> None:
    replica = DirectoryReplica(tmp_path / "replica")
    db = tmp_path / "audit.sqlite"
    async with (
        replicating(replica, db, compact_segments=10**6) as replicator,
        trio.open_nursery() as nursery,
    ):

        async def compacted(rows: int) -> None:
            await replicator.store.insert(audit_rows(rows))
            await wait_for(partial(fully_replicated, replicator))
            assert await replicator.compact(force=True)

        await compacted(20)  # manifest 1: [1-4]
        await compacted(10)  # manifest 2: [1-4, 5-6]; segments 1-4 go
        paused = Paused(replica)
        done = trio.Event()

        async def restore_now() -> None:
            await trio.to_thread.run_sync(restore, paused, tmp_path / "restored.sqlite",
                                          abandon_on_cancel=True)  # fmt: skip
            done.set()

        nursery.start_soon(restore_now)
        await wait_for(paused.waiting.is_set)  # it has read manifest 2, not yet its objects
        await compacted(10)  # manifest 3: [1-8]
        await compacted(10)  # manifest 4: [1-8, 9-10]; manifest 2's objects go
        paused.go.set()
        await done.wait()
        nursery.cancel_scope.cancel()
    assert paused.missing == 1, "it met the clean-up once, then read the newest manifest"
    assert archived(tmp_path / "restored.sqlite") == archived(db)
