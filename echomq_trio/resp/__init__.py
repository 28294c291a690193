"""A transport of the bus's own on trio streams (``open_bus(..., transport="trio")``).

``_codec`` is the RESP protocol without I/O: requests to bytes, bytes to replies, each reply
paired with its request (``hiredis`` parses). ``_client`` is the trio part: ``RespTransport``, one
pipelined connection shared by every task, with its tasks in the nursery of ``open_resp``'s
block. ``_cluster`` routes calls by slot to a ``RespTransport`` per primary
(``ClusterTransport``). ``open_trio`` opens whichever the URL names.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

from echomq_trio.resp._client import RespSubscription, RespTransport, open_resp
from echomq_trio.resp._cluster import ClusterTransport, command_key, key_slot, open_cluster
from echomq_trio.resp._codec import Codec, ProtocolError, encode
from echomq_trio.transport import Transport
from echomq_trio.wire import ConnectionSpec, parse_url

__all__ = [
    "ClusterTransport",
    "Codec",
    "ProtocolError",
    "RespSubscription",
    "RespTransport",
    "command_key",
    "encode",
    "key_slot",
    "open_cluster",
    "open_resp",
    "open_trio",
]


def open_trio(target: str | ConnectionSpec) -> AbstractAsyncContextManager[Transport]:
    """``open_cluster`` for a cluster URL, else ``open_resp``; a malformed URL raises
    ``ValueError`` at once."""
    spec = parse_url(target) if isinstance(target, str) else target
    return open_cluster(spec) if spec.cluster else open_resp(spec)
