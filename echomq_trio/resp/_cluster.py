"""``ClusterTransport``: the trio transport on a Valkey/Redis Cluster.

Theory of operation:

* The slot map (``CLUSTER SLOTS``: which primary serves each of the 16,384 slots) is read when
  the transport opens, and again when the cluster says it changed: a ``MOVED`` reply, a
  connection to a node lost, ``CLUSTERDOWN``. A read of the map is one call to any node that
  answers; concurrent callers share one.
* Each primary has one ``client.RespTransport`` of its own (one pipelined connection, made on
  first use): a call goes to the primary of its key's slot (``key_slot``: CRC16 of the key, or of
  its ``{hash tag}``), a call without a key to any primary.
* ``MOVED slot host:port``: the slot has a new owner; the map learns it at once, is read again in
  full on the next call, and the call is sent again to the new owner. ``ASK slot host:port``
  (a slot being migrated): the call is sent once to that node right behind ``ASKING``, on the
  same connection. ``TRYAGAIN``, ``CLUSTERDOWN``, ``LOADING`` and ``MASTERDOWN`` are tried again
  with backoff (10 ms doubling to 200 ms) until the request timeout, then raised as they are
  (``ConnectionLost``). At most 16 redirections per call.
* A connection lost raises ``ConnectionLost`` to its callers, as on a single server, and marks
  the map stale: the next call reads it again first, so after a failover calls reach the
  promoted replica as soon as the cluster has promoted it.
* ``scan`` walks every primary; ``subscribe`` subscribes on one node (a cluster forwards every
  ``PUBLISH`` to every node); ``blocking()`` opens a cluster transport of its own.
"""

from __future__ import annotations

import binascii
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import attrs
import trio

from echomq_trio._replies import as_text
from echomq_trio.errors import AuthenticationFailed, ConnectionLost, ServerError
from echomq_trio.resp._client import RespSubscription, RespTransport
from echomq_trio.resp._client import _connect as connect_node
from echomq_trio.wire import ConnectionSpec, parse_url, probe

__all__ = ["ClusterTransport", "command_key", "key_slot", "open_cluster"]

log = logging.getLogger("echomq_trio.resp")

SLOTS = 16384
MAX_REDIRECTS = 16
RETRY_FIRST_S = 0.01
RETRY_MAX_S = 0.2
REFRESH_EVERY_S = 0.1  # a stale map is read again at most this often
_NOT_NOW = ("TRYAGAIN", "CLUSTERDOWN", "LOADING", "MASTERDOWN")
# Commands without a key (sent to any primary), and those whose key is their third word.
_KEYLESS = frozenset(
    b"PING TIME INFO SCRIPT CLUSTER CONFIG PUBLISH COMMAND CLIENT ECHO DBSIZE FLUSHALL "
    b"FLUSHDB LASTSAVE BGREWRITEAOF BGSAVE SAVE SLOWLOG LATENCY ACL FUNCTION HELLO AUTH "
    b"READONLY READWRITE WAIT WAITAOF RANDOMKEY SCAN KEYS MULTI EXEC DISCARD DEBUG".split()
)
_SUBCOMMAND_KEY = frozenset(b"OBJECT MEMORY XINFO XGROUP".split())
_SPLIT = frozenset(("DEL", "UNLINK", "EXISTS", "TOUCH", "MGET", "MSET"))  # split by slot
_SCRIPTS = frozenset(b"EVAL EVALSHA EVAL_RO EVALSHA_RO FCALL FCALL_RO".split())

T = TypeVar("T")
Address = tuple[str, int]


def key_slot(key: str | bytes) -> int:
    """The cluster slot of ``key``: CRC16 (XMODEM) of its hash tag (the text between its first
    ``{`` and the next ``}``, if not empty) or of the whole key, modulo 16,384."""
    raw = key.encode() if isinstance(key, str) else key
    start = raw.find(b"{")
    if start >= 0:
        end = raw.find(b"}", start + 1)
        if end > start + 1:
            raw = raw[start + 1 : end]
    return binascii.crc_hqx(raw, 0) % SLOTS


def command_key(args: Sequence[str | bytes]) -> str | bytes | None:
    """The key a raw command is routed by (``None``: any primary will do)."""
    name = args[0]
    head = (name.encode() if isinstance(name, str) else name).upper()
    if head in _KEYLESS:
        return None
    if head in _SCRIPTS:
        return args[3] if len(args) > 3 and int(args[2]) > 0 else None
    if head in _SUBCOMMAND_KEY:
        return args[2] if len(args) > 2 else None
    return args[1] if len(args) > 1 else None


def parse_slots(reply: Any, asked: Address) -> dict[int, Address]:
    """``CLUSTER SLOTS``'s reply as the first slot of each range → its primary (a node that gives
    no host of its own is the one ``asked``)."""
    ranges: dict[int, Address] = {}
    for entry in reply:
        start, end, primary = int(entry[0]), int(entry[1]), entry[2]
        host = as_text(primary[0]) if primary[0] else asked[0]
        if host == "?":
            host = asked[0]
        for slot in range(start, end + 1):
            ranges[slot] = (host, int(primary[1]))
    return ranges


@attrs.define(eq=False)
class _Retry:
    delay_s: float = RETRY_FIRST_S

    async def wait(self) -> None:
        await trio.sleep(self.delay_s)
        self.delay_s = min(RETRY_MAX_S, self.delay_s * 2)


class ClusterTransport:
    """A ``transport.Transport`` on a cluster; get one from ``open_cluster``."""

    def __init__(
        self,
        spec: ConnectionSpec,
        nursery: trio.Nursery,
        *,
        connect: Callable[[ConnectionSpec], Awaitable[trio.abc.Stream]] | None = None,
    ) -> None:
        self.spec = spec
        self._nursery = nursery
        self._connect = connect  # what opens a node's connection (a test's fake nodes)
        self._where = spec.redacted()
        self._timeout_s = spec.timeout_ms / 1000
        self._slots: list[Address | None] = [None] * SLOTS
        self._nodes: dict[Address, RespTransport] = {}
        self._stale = True
        self._refreshing = trio.Lock()
        self._refreshed_at = -1e9
        self._closed = False

    @property
    def cluster(self) -> bool:
        return True

    # --- the map ---------------------------------------------------------------------------

    def _node(self, address: Address) -> RespTransport:
        node = self._nodes.get(address)
        if node is None:
            if self._closed:
                raise ConnectionLost(f"the connection to {self._where} is closed")
            spec = attrs.evolve(self.spec, hosts=(address,), cluster=False)
            node = RespTransport(spec, self._nursery, connect=self._connect)
            self._nodes[address] = node
        return node

    def _primaries(self) -> list[Address]:
        return sorted({a for a in self._slots if a is not None})

    async def _refresh(self) -> None:
        """Read the slot map from the first node that answers (known primaries, then seeds)."""
        if self._refreshing.locked():
            async with self._refreshing:
                return  # another task just read it
        async with self._refreshing:
            problems = []
            for address in dict.fromkeys([*self._primaries(), *self.spec.hosts]):
                try:
                    reply = await self._node(address)._call(("CLUSTER", "SLOTS"))
                except AuthenticationFailed:
                    raise
                except (ConnectionLost, ServerError) as exc:
                    problems.append(f"{address[0]}:{address[1]}: {exc}")
                    continue
                slots: list[Address | None] = [None] * SLOTS
                for slot, owner in parse_slots(reply, address).items():
                    slots[slot] = owner
                self._slots = slots
                self._stale = False
                self._refreshed_at = trio.current_time()
                for gone in set(self._nodes) - set(self._primaries()) - set(self.spec.hosts):
                    await self._nodes.pop(gone).aclose()
                return
            raise ConnectionLost(
                f"cannot read the slot map of {self._where}: {'; '.join(problems)}"
            )

    async def _owner(self, key: str | bytes | None) -> RespTransport:
        if self._stale and trio.current_time() - self._refreshed_at >= REFRESH_EVERY_S:
            await self._refresh()
        if key is None:
            primaries = self._primaries()
            if not primaries:
                raise ConnectionLost(f"no primary of {self._where} serves any slot")
            return self._node(primaries[0])
        owner = self._slots[key_slot(key)]
        if owner is None:
            self._stale = True
            raise ConnectionLost(
                f"no primary of {self._where} serves slot {key_slot(key)} (CLUSTERDOWN?)"
            )
        return self._node(owner)

    async def _routed(
        self,
        key: str | bytes | None,
        send: Callable[[RespTransport, bool], Awaitable[T]],
    ) -> T:
        """``send(node, asking)`` to the owner of ``key``'s slot, following ``MOVED`` and ``ASK``
        and trying ``TRYAGAIN``/``CLUSTERDOWN``/``LOADING`` again until the request timeout."""
        retry = _Retry()
        deadline = trio.current_time() + self._timeout_s
        node = await self._owner(key)
        asking = False
        for _ in range(MAX_REDIRECTS):
            try:
                return await send(node, asking)
            except ServerError as exc:
                text = str(exc)
                kind, _, rest = text.partition(" ")
                if kind not in ("MOVED", "ASK"):
                    raise
                slot_text, _, address_text = rest.partition(" ")
                host, _, port = address_text.rpartition(":")
                address = (host or node.spec.hosts[0][0], int(port))
                if kind == "MOVED":
                    self._slots[int(slot_text)] = address
                    self._stale = True
                    asking = False
                else:
                    asking = True
                node = self._node(address)
            except ConnectionLost as exc:
                self._stale = True
                if not str(exc).startswith(_NOT_NOW) or trio.current_time() >= deadline:
                    raise
                await retry.wait()
                node = await self._owner(key)
                asking = False
        raise ConnectionLost(
            f"more than {MAX_REDIRECTS} redirections for one call on {self._where}"
        )

    # --- the transport ---------------------------------------------------------------------

    async def script(self, name: str, keys: Sequence[str], args: Sequence[str | bytes]) -> Any:
        return await self._routed(
            keys[0] if keys else None,
            lambda node, asking: node._script(name, keys, args, asking=asking),
        )

    async def command(self, *args: str | bytes) -> Any:
        """Run one raw command on the primary of its key's slot. ``DEL``, ``UNLINK``,
        ``EXISTS``, ``TOUCH``, ``MGET`` and ``MSET`` with keys in several slots are split by
        slot, as glide splits them (not atomic across slots)."""
        if not args:
            raise ValueError("a command needs at least its name")
        head = args[0]
        name = (head if isinstance(head, str) else head.decode(errors="replace")).upper()
        if name in _SPLIT and len(args) > 2:
            return await self._split(name, args)
        return await self._one(args)

    async def _one(self, args: Sequence[str | bytes]) -> Any:
        return await self._routed(
            command_key(args), lambda node, asking: node._command(args, asking=asking)
        )

    async def _split(self, name: str, args: Sequence[str | bytes]) -> Any:
        step = 2 if name == "MSET" else 1
        groups: dict[int, list[int]] = {}  # slot -> the indexes of its keys in args
        for i in range(1, len(args), step):
            groups.setdefault(key_slot(args[i]), []).append(i)
        if len(groups) == 1:
            return await self._one(args)
        if name == "MSET":
            for indexes in groups.values():
                await self._one((args[0], *(a for i in indexes for a in args[i : i + 2])))
            return "OK"
        if name == "MGET":
            values: list[Any] = [None] * (len(args) - 1)
            for indexes in groups.values():
                got = await self._one((args[0], *(args[i] for i in indexes)))
                for i, value in zip(indexes, got, strict=True):
                    values[i - 1] = value
            return values
        total = 0
        for indexes in groups.values():
            total += int(await self._one((args[0], *(args[i] for i in indexes))))
        return total

    async def scan(self, match: str, *, count: int = 1000) -> list[str]:
        await self._owner(None)  # a fresh map if it is stale
        found: set[str] = set()
        for address in self._primaries():
            found.update(await self._node(address).scan(match, count=count))
        return sorted(found)

    async def blpop(self, key: str, timeout_s: float) -> bytes | None:
        return await self._routed(key, lambda node, asking: node.blpop(key, timeout_s))

    async def wait_aof(
        self, key: str, numlocal: int, numreplicas: int, timeout_ms: int
    ) -> tuple[int, int]:
        return await self._routed(
            key, lambda node, asking: node.wait_aof(key, numlocal, numreplicas, timeout_ms)
        )

    async def wait_replicas(self, key: str, numreplicas: int, timeout_ms: int) -> int:
        return await self._routed(
            key, lambda node, asking: node.wait_replicas(key, numreplicas, timeout_ms)
        )

    async def server_time_ms(self) -> int:
        return await (await self._owner(None)).server_time_ms()

    @asynccontextmanager
    async def blocking(self) -> AsyncIterator[ClusterTransport]:
        """A cluster transport of its own, for blocking pops."""
        async with open_cluster(self.spec) as other:
            yield other

    @asynccontextmanager
    async def subscribe(
        self, *, channels: Sequence[str] = (), patterns: Sequence[str] = ()
    ) -> AsyncIterator[RespSubscription]:
        """A connection of its own to one node, subscribed (every node sees every PUBLISH).
        When that node is lost, it subscribes again on the first node that answers (a known
        primary, then the URL's nodes), as a failover asks."""
        if not channels and not patterns:
            raise ValueError("subscribe to at least one channel or pattern")
        await self._owner(None)  # the map, so the primaries are known

        async def any_node(spec: ConnectionSpec) -> trio.abc.Stream:
            problems = []
            for address in dict.fromkeys([*self._primaries(), *self.spec.hosts]):
                node = attrs.evolve(spec, hosts=(address,), cluster=False)
                try:
                    return await (self._connect or connect_node)(node)
                except ConnectionLost as exc:
                    problems.append(str(exc))
            raise ConnectionLost(f"no node of {self._where} answers: {'; '.join(problems)}")

        async with RespSubscription.open(self.spec, channels, patterns, any_node) as sub:
            yield sub

    async def aclose(self) -> None:
        self._closed = True
        for node in self._nodes.values():
            await node.aclose()


@asynccontextmanager
async def open_cluster(target: str | ConnectionSpec) -> AsyncIterator[ClusterTransport]:
    """Connect to the cluster named by a URL (or a parsed spec); close every connection on
    exit. A cluster none of whose seeds answers raises ``ConnectionLost`` naming why."""
    spec = parse_url(target) if isinstance(target, str) else target
    await probe(spec)
    try:
        async with trio.open_nursery() as nursery:
            transport = ClusterTransport(spec, nursery)
            try:
                await transport._refresh()
                yield transport
            finally:
                await transport.aclose()
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
