"""A transport of the bus's own on trio streams (``open_bus(..., transport="trio")``).

``codec`` is the RESP protocol without I/O: requests to bytes, bytes to replies, each reply
paired with its request (``hiredis`` parses). ``client`` is the trio part: ``RespTransport``, one
pipelined connection shared by every task, with its writer and reader tasks in the nursery of
``open_resp``'s block.
"""

from echomq_trio.resp.client import RespSubscription, RespTransport, open_resp
from echomq_trio.resp.codec import Codec, ProtocolError, encode

__all__ = ["Codec", "ProtocolError", "RespSubscription", "RespTransport", "encode", "open_resp"]
