"""The trio transport against real servers: credentials from the URL (a ``requirepass`` server),
RESP2 where the server has no ``HELLO``, a script the server lost loaded again, a server killed
mid-call (``ConnectionLost``, then the next call connects again), the request timeout, blocking
pops and pub/sub on connections of their own."""

from __future__ import annotations

import datetime
import hashlib
import os
import re
import ssl
import subprocess
import uuid
from collections.abc import Iterator
from ipaddress import ip_address
from pathlib import Path

import pytest
import trio
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from echomq_trio import Bus, jobs, open_bus
from echomq_trio._library import library
from echomq_trio._replies import as_bytes, as_text
from echomq_trio.errors import (
    AuthenticationFailed,
    ConnectionLost,
    OutOfMemory,
    RequestTimedOut,
    ServerError,
)
from echomq_trio.resp import open_resp
from echomq_trio.results import Outcome
from echomq_trio.server import find_server_binary, free_port, start_server
from echomq_trio.transport import Message
from echomq_trio.wire import parse_url, script_source
from tests.support import (
    PASSWORD,
    server_version,
    stop_servers,
    wait_for,
    wait_server_ready,
)

pytestmark = pytest.mark.server
LOOPBACK_IP = ip_address("127.0.0.1")


async def test_the_urls_credentials_open_a_requirepass_server(standalone_url: str) -> None:
    async with open_resp(standalone_url) as t:
        assert await t.command("PING") == b"PONG"
        hello = await t.command("HELLO")
        assert isinstance(hello, dict)  # RESP3: a map
        assert hello[b"proto"] == 3
    named = standalone_url.replace("redis://:", "redis://default:")
    async with open_resp(named) as t:
        assert await t.command("SET", "resp:auth", "1") == "OK"


async def test_refused_credentials_raise_authentication_failed(standalone_url: str) -> None:
    wrong = standalone_url.replace(PASSWORD, "not-the-password")
    with pytest.raises(AuthenticationFailed, match="wrong username or password") as info:
        async with open_resp(wrong):
            pass
    assert "not-the-password" not in str(info.value)
    none = re.sub(r"//:[^@]*@", "//", standalone_url)
    with pytest.raises(AuthenticationFailed, match="requires a password and the URL has none"):
        async with open_resp(none):
            pass


@pytest.fixture
def no_hello_url(tmp_path: Path) -> Iterator[str]:
    """A server with a password and without ``HELLO`` (as before Redis 6)."""
    port = free_port()
    argv = [find_server_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    argv += ["--dir", str(tmp_path), "--requirepass", PASSWORD, "--rename-command", "HELLO", ""]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        wait_server_ready(port, proc)
        yield f"redis://:{PASSWORD}@127.0.0.1:{port}"
    finally:
        stop_servers([proc])


async def test_a_server_without_hello_is_spoken_to_in_resp2(no_hello_url: str) -> None:
    async with open_bus(no_hello_url, transport="trio") as bus:
        assert await bus.command("HSET", "h", "a", "1") == 1
        assert await bus.command("HGETALL", "h") == [b"a", b"1"]  # RESP2: a flat array
        admitted = await jobs.enqueue(bus, "resp2", b"x")
        assert admitted.outcome is Outcome.ENQUEUED
        async with bus.transport.subscribe(channels=["c"]) as sub:
            await wait_for(lambda: _publish(bus, "c", b"hi"))
            assert await sub.receive() == Message("c", b"hi")


async def _publish(bus: Bus, channel: str, data: bytes) -> bool:
    received = await bus.command("PUBLISH", channel, data)
    return bool(received)


async def test_a_flushed_library_is_loaded_again_and_answers(standalone_url: str) -> None:
    async with open_bus(standalone_url, transport="trio") as bus:
        first = await jobs.enqueue(bus, "resp.flush", b"one")
        assert await bus.command("FUNCTION", "FLUSH") == "OK"
        second = await jobs.enqueue(bus, "resp.flush", b"two")
        assert (first.outcome, second.outcome) == (Outcome.ENQUEUED, Outcome.ENQUEUED)
        (listed,) = await bus.command("FUNCTION", "LIST", "LIBRARYNAME", library().name)
        fields = {as_text(k): v for k, v in _pairs(listed)}
        assert as_text(fields["library_name"]) == library().name


async def test_a_user_refused_functions_runs_the_scripts_by_evalsha(standalone_url: str) -> None:
    """An ACL user who may not call or load functions: the bus's scripts run by ``EVALSHA``, and
    a script the server lost (``SCRIPT FLUSH``) is loaded again."""
    user, secret = f"nofn{uuid.uuid4().hex[:8]}", "pw-" + uuid.uuid4().hex
    async with open_bus(standalone_url, transport="trio") as admin:
        await admin.command(
            "ACL", "SETUSER", user, "on", f">{secret}", "~*", "&*", "+@all", "-fcall",
            "-fcall_ro", "-function",
        )  # fmt: skip
        try:
            port = parse_url(standalone_url).hosts[0][1]
            url = f"redis://{user}:{secret}@127.0.0.1:{port}"
            async with open_bus(url, transport="trio") as bus:
                first = await jobs.enqueue(bus, "resp.evalsha", b"one")
                assert await bus.command("SCRIPT", "FLUSH") == "OK"
                second = await jobs.enqueue(bus, "resp.evalsha", b"two")
                assert (first.outcome, second.outcome) == (Outcome.ENQUEUED, Outcome.ENQUEUED)
                sha = hashlib.sha1(script_source("enqueue").encode()).hexdigest()
                assert await bus.command("SCRIPT", "EXISTS", sha) == [1]
        finally:
            await admin.command("ACL", "DELUSER", user)


def _pairs(reply: object) -> list[tuple[object, object]]:
    """A map reply (RESP3: a dict; RESP2: a flat list) as its pairs."""
    if isinstance(reply, dict):
        return list(reply.items())
    assert isinstance(reply, list)
    return list(zip(reply[::2], reply[1::2], strict=True))


async def test_error_replies_are_server_errors(standalone_url: str) -> None:
    async with open_resp(standalone_url) as t:
        await t.command("SET", "resp:str", "x")
        with pytest.raises(ServerError, match=r"^WRONGTYPE Operation against a key"):
            await t.command("LPUSH", "resp:str", "x")
        with pytest.raises(ServerError, match="user_script:1: boom"):
            await t.command("EVAL", "error('boom')", "0")
        assert await t.command("PING") == b"PONG"  # the connection stays in step


@pytest.mark.timeout_s(90)
async def test_a_server_killed_mid_call_raises_connection_lost_and_the_next_call_reconnects(
    tmp_path: Path,
) -> None:
    async with (
        start_server(tmp_path) as server,
        open_bus(server.url, transport="trio") as bus,
    ):
        assert await bus.command("SET", "k", "v") == "OK"
        lost: list[ConnectionLost] = []

        async def parked() -> None:
            async with bus.transport.blocking() as other:
                try:
                    await other.blpop("never", 30)
                except ConnectionLost as exc:
                    lost.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(parked)

            async def waiting() -> bool:
                info = await bus.command("INFO", "clients")
                return b"blocked_clients:1" in as_bytes(info)

            await wait_for(waiting)
            server.kill()
        assert len(lost) == 1
        assert "lost the connection" in str(lost[0])
        await wait_for(lambda: server.restarts == 1, timeout=30)

        async def answers() -> bool:
            try:
                return await bus.command("PING") == b"PONG"
            except ConnectionLost:
                return False

        await wait_for(answers, timeout=30)
        assert await bus.command("GET", "k") == b"v"  # the append-only file kept it


async def test_a_call_past_the_request_timeout_raises_and_the_next_one_answers(
    standalone_url: str,
) -> None:
    short = standalone_url + "?timeout_ms=200"
    async with open_resp(standalone_url) as other, open_resp(short) as t:
        assert await other.command("CLIENT", "PAUSE", "600", "ALL") == "OK"
        with pytest.raises(RequestTimedOut, match="did not answer GET within 200 ms"):
            await t.command("GET", "resp:paused")
        await wait_for(lambda: _pong(t), timeout=5)


async def test_a_reply_that_came_while_this_process_was_stopped_past_its_timeout_is_taken(
    standalone_url: str,
) -> None:
    # The request is on the server (a BLPOP that answers at its 1.5 s timeout); then this
    # process is stopped (SIGSTOP: as a debugger, a swap storm or a held VM would) until well
    # past the call's 2 s timeout. On waking, the reply is in the socket and the deadline long
    # past: the reply wins. Three rounds: whether the watch or the reader runs first on waking
    # is trio's draw, so one round would miss a regression half the time or more.
    me = os.getpid()
    async with (
        open_resp(standalone_url + "?timeout_ms=2000") as t,
        open_resp(standalone_url) as other,
    ):
        me_on_server = await t.command("CLIENT", "ID")

        async def blocked() -> bool:  # the BLPOP is on the server, waiting
            listed = as_text(await other.command("CLIENT", "LIST", "ID", str(me_on_server)))
            return "flags=b " in listed

        async def call(got: list[object]) -> None:
            started = trio.current_time()
            got.append(await t.command("BLPOP", f"resp:stopped:{uuid.uuid4().hex}", "1.5"))
            got.append(trio.current_time() - started)

        for _ in range(3):
            got: list[object] = []
            stopper = await trio.lowlevel.open_process(
                ["sh", "-c", f"read go; kill -STOP {me}; sleep 3; kill -CONT {me}"],
                stdin=subprocess.PIPE,
            )
            async with trio.open_nursery() as nursery:
                nursery.start_soon(call, got)
                await wait_for(blocked, timeout=10)
                assert stopper.stdin is not None
                await stopper.stdin.send_all(b"go\n")
                with trio.fail_after(10):
                    await stopper.wait()
            reply, took = got
            assert isinstance(took, float) and took > 2.0, f"the stop came too late ({took})"
            assert reply is None  # BLPOP's answer at its timeout


async def _pong(t: object) -> bool:
    try:
        return await t.command("PING") == b"PONG"  # type: ignore[attr-defined, no-any-return]
    except RequestTimedOut:
        return False


async def test_blocking_pops_and_subscriptions_have_connections_of_their_own(
    standalone_url: str,
) -> None:
    async with open_bus(standalone_url, transport="trio") as bus:
        got: list[bytes | None] = []
        async with bus.transport.blocking() as parked:

            async def pop() -> None:
                got.append(await parked.blpop("resp:list", 10))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(pop)
                await trio.testing.wait_all_tasks_blocked()
                assert await bus.command("PING") == b"PONG"  # not behind the pop
                await bus.command("RPUSH", "resp:list", "x")
            assert got == [b"x"]
            assert await parked.blpop("resp:list", 0.05) is None
        async with bus.transport.subscribe(channels=["a"], patterns=["p.*"]) as sub:
            await wait_for(lambda: _publish(bus, "p.1", b"two"))
            await bus.command("PUBLISH", "a", "one")
            assert await sub.receive() == Message("p.1", b"two", "p.*")
            assert await sub.receive() == Message("a", b"one")


async def test_a_bad_transport_name_or_a_cluster_url_for_one_server_is_refused(
    standalone_url: str,
) -> None:
    with pytest.raises(ValueError, match="transport must be one of \\['glide', 'trio'\\]"):
        async with open_bus(standalone_url, transport="redis"):
            pass
    with pytest.raises(ValueError, match="standalone server only"):
        async with open_resp("redis://127.0.0.1:1,127.0.0.1:2"):
            pass


async def test_an_error_raised_in_the_block_comes_out_as_itself(standalone_url: str) -> None:
    with pytest.raises(KeyError, match="mine"):
        async with open_resp(standalone_url):
            raise KeyError("mine")


@pytest.fixture
def tls_proxy_context(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ssl.SSLContext:
    """A server context with a fresh self-signed certificate for 127.0.0.1, which clients of
    this process trust (``SSL_CERT_FILE``)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(LOOPBACK_IP)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    (tmp_path / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "cert.pem"))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    return ctx


async def test_rediss_speaks_tls(
    standalone_url: str, tls_proxy_context: ssl.SSLContext, nursery: trio.Nursery
) -> None:
    """Through a TLS proxy in front of the test server (its binary has no TLS of its own)."""
    spec = parse_url(standalone_url)
    host, port = spec.hosts[0]

    async def proxy(client: trio.SocketStream) -> None:
        tls = trio.SSLStream(client, tls_proxy_context, server_side=True)
        try:
            async with await trio.open_tcp_stream(host, port) as server:

                async def pipe(a: trio.abc.Stream, b: trio.abc.Stream) -> None:
                    while data := await a.receive_some(65536):
                        await b.send_all(data)

                async with trio.open_nursery() as inner:
                    inner.start_soon(pipe, tls, server)
                    await pipe(server, tls)
                    inner.cancel_scope.cancel()
        except* (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # a probe that hung up, or the end of the test
        finally:
            await trio.aclose_forcefully(tls)

    listeners = await nursery.start(trio.serve_tcp, proxy, 0)
    proxy_port = listeners[0].socket.getsockname()[1]
    url = f"rediss://:{PASSWORD}@127.0.0.1:{proxy_port}"
    async with open_bus(url, transport="trio") as bus:
        assert await bus.command("PING") == b"PONG"
        got: dict[int, object] = {}

        async def one(i: int) -> None:
            got[i] = await bus.command("ECHO", f"v{i}")

        async with trio.open_nursery() as callers:
            for i in range(50):
                callers.start_soon(one, i)
        assert got == {i: f"v{i}".encode() for i in range(50)}
        assert (await jobs.enqueue(bus, "resp.tls", b"x")).outcome is Outcome.ENQUEUED


SAME_SHAPE = [
    ("SET", "{s}str", "v"),
    ("GET", "{s}str"),
    ("GET", "{s}missing"),
    ("PING",),
    ("TYPE", "{s}str"),
    ("INCRBYFLOAT", "{s}float", "1.5"),
    ("HSET", "{s}hash", "a", "1", "b", "2"),
    ("HGETALL", "{s}hash"),
    ("HMGET", "{s}hash", "a", "nope"),
    ("ZADD", "{s}z", "1", "m1", "2.5", "m2", "3", "m3"),
    ("ZRANGE", "{s}z", "0", "-1"),
    ("ZRANGE", "{s}z", "0", "-1", "REV", "WITHSCORES"),
    ("ZRANGEBYSCORE", "{s}z", "-inf", "+inf", "WITHSCORES"),
    ("ZSCORE", "{s}z", "m2"),
    ("ZPOPMIN", "{s}z"),
    ("ZPOPMAX", "{s}z", "1"),
    ("SADD", "{s}set", "x", "y"),
    ("SMEMBERS", "{s}set"),
    ("SISMEMBER", "{s}set", "x"),
    ("RPUSH", "{s}list", "a", "b"),
    ("LRANGE", "{s}list", "0", "-1"),
    ("EXISTS", "{s}str", "{s}missing"),
    ("PTTL", "{s}str"),
    ("ZADD", "{s}z2", "1", "a", "2", "b"),
    ("ZREVRANGE", "{s}z2", "0", "-1", "WITHSCORES"),
    ("ZUNION", "2", "{s}z2", "{s}z2", "WITHSCORES"),
    ("ZINTER", "1", "{s}z2", "WITHSCORES"),
    ("ZDIFF", "1", "{s}z2", "WITHSCORES"),
    ("ZRANK", "{s}z2", "b"),
    ("ZMSCORE", "{s}z2", "a", "zz"),
    ("HINCRBYFLOAT", "{s}hash", "a", "0.5"),
    ("HEXISTS", "{s}hash", "a"),
    ("SMISMEMBER", "{s}set", "x", "q"),
    ("EXPIRE", "{s}str", "100"),
    ("PEXPIRE", "{s}str", "100000"),
    ("PERSIST", "{s}str"),
    ("SETNX", "{s}str", "x"),
    ("MSETNX", "{s}n1", "1", "{s}n2", "2"),
    ("XADD", "{s}stream", "1-1", "f", "v"),
    ("XRANGE", "{s}stream", "-", "+"),
    ("XREVRANGE", "{s}stream", "+", "-", "COUNT", "1"),
    ("CONFIG", "GET", "maxmemory-policy"),
    ("HGET", "{s}hash", "a"),
    ("SCARD", "{s}set"),
    ("ZCOUNT", "{s}z2", "-inf", "+inf"),
    ("HSETNX", "{s}hash", "c", "3"),
    ("HSETNX", "{s}hash", "c", "3"),
    ("EXPIREAT", "{s}str", "4102444800"),
    ("PEXPIREAT", "{s}str", "4102444800000"),
    ("SMOVE", "{s}set", "{s}set2", "x"),
    ("RENAMENX", "{s}n1", "{s}n3"),
    ("COPY", "{s}n2", "{s}n4"),
    ("XGROUP", "CREATE", "{s}stream", "g", "0"),
    ("XREADGROUP", "GROUP", "g", "c", "COUNT", "10", "STREAMS", "{s}stream", ">"),
    ("XREADGROUP", "GROUP", "g", "c", "COUNT", "10", "STREAMS", "{s}stream", "0"),
    ("XREAD", "COUNT", "5", "STREAMS", "{s}stream", "0"),
    ("XPENDING", "{s}stream", "g"),
    ("XLEN", "{s}stream"),
    ("ZSCORE", "{s}z2", "nope"),
    ("ZINCRBY", "{s}z2", "1", "a"),
    ("ZADD", "{s}z2", "INCR", "1", "a"),
    *([("ZRANK", "{s}z2", "a", "WITHSCORE")] if server_version() >= (7, 2) else []),
    ("GETDEL", "{s}n2"),
    ("HSTRLEN", "{s}hash", "a"),
    ("OBJECT", "ENCODING", "{s}hash"),
    ("DBSIZE",),
]


async def test_raw_commands_answer_in_the_same_shapes_on_both_transports(
    standalone_url: str,
) -> None:
    answers: dict[str, list[object]] = {}
    for transport in ("glide", "trio"):
        async with open_bus(standalone_url, transport=transport) as bus:
            await bus.command("DEL", "{s}str", "{s}float", "{s}hash", "{s}z", "{s}set", "{s}list",
                              "{s}z2", "{s}n1", "{s}n2", "{s}n3", "{s}n4", "{s}stream",
                              "{s}set2")  # fmt: skip
            answers[transport] = [await bus.command(*args) for args in SAME_SHAPE]
    differ = []
    for args, glide, trio_ in zip(SAME_SHAPE, answers["glide"], answers["trio"], strict=True):
        if args[0] in ("PING", "TYPE"):  # a simple string: str on glide, bytes here
            if as_text(glide) != as_text(trio_):  # type: ignore[arg-type]
                differ.append((args, glide, trio_))
        elif (type(glide), glide) != (type(trio_), trio_):
            differ.append((args, glide, trio_))
    assert not differ, "\n".join(map(repr, differ))


@pytest.mark.cluster
async def test_multi_key_commands_across_slots_are_split_by_slot(server_url: str) -> None:
    keys = [f"resp:split:{i}" for i in range(12)]  # in several slots of a cluster
    async with open_bus(server_url, transport="trio") as bus:
        assert await bus.command("MSET", *(a for k in keys for a in (k, k.upper()))) == "OK"
        assert await bus.command("MGET", *keys, "resp:split:none") == [
            *(k.upper().encode() for k in keys),
            None,
        ]
        assert await bus.command("EXISTS", *keys, "resp:split:none") == 12
        assert await bus.command("DEL", *keys[:6]) == 6
        assert await bus.command("UNLINK", *keys) == 6


async def test_a_write_refused_at_maxmemory_is_out_of_memory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with start_server(tmp_path) as server, open_bus(server.url, transport="trio") as bus:
        await jobs.enqueue(bus, "resp.oom", b"before")
        assert await bus.command("CONFIG", "SET", "maxmemory", "1") == "OK"
        with pytest.raises(OutOfMemory, match="out of memory and refused a write"):
            await bus.command("SET", "resp:oom", "x")
        with pytest.raises(OutOfMemory):
            await jobs.enqueue(bus, "resp.oom", b"refused")
        assert await bus.command("CONFIG", "SET", "maxmemory", "0") == "OK"
        assert (await jobs.enqueue(bus, "resp.oom", b"after")).outcome is Outcome.ENQUEUED
    refusals = [r for r in caplog.records if "refuses writes" in r.getMessage()]
    assert len(refusals) == 1  # told once, not per refused write


async def test_a_request_larger_than_the_kernels_buffer_goes_out_whole_amid_others(
    standalone_url: str,
) -> None:
    big = b"x" * (8 << 20)  # far more than a socket takes at once: the writer task sends the rest
    async with open_resp(standalone_url) as t:
        got: dict[int, object] = {}

        async def small(i: int) -> None:
            got[i] = await t.command("ECHO", f"v{i}")

        async with trio.open_nursery() as nursery:
            for i in range(20):
                nursery.start_soon(small, i)
            nursery.start_soon(t.command, "SET", "resp:big", big)
            for i in range(20, 40):
                nursery.start_soon(small, i)
        assert got == {i: f"v{i}".encode() for i in range(40)}
        assert await t.command("STRLEN", "resp:big") == len(big)
        assert await t.command("GET", "resp:big") == big  # a reply over many reads, too
        await t.command("DEL", "resp:big")


@pytest.mark.parametrize("transport", ["trio", "glide"])
async def test_a_subscription_outlives_a_restart_of_its_server(
    tmp_path: Path, transport: str
) -> None:
    """A subscriber's connection is lost when its server is killed and started again (the
    embedded server's supervisor restarts it): the subscription connects and subscribes again
    by itself, and a message published after the restart arrives, on either transport (glide's
    client does this itself; the trio transport's ``RespSubscription`` likewise). What was
    published while it was away is lost, as pub/sub keeps nothing."""
    async with (
        start_server(tmp_path) as server,
        open_bus(server.url, transport=transport) as bus,
        bus.transport.subscribe(channels=["news"]) as sub,
    ):
        await wait_for(lambda: _publish(bus, "news", b"before"))
        assert await sub.receive() == Message("news", b"before")
        server.kill()
        await wait_for(lambda: server.restarts == 1, timeout=30)

        async def heard_after() -> bool:  # published until the subscriber is back
            return await _publish(bus, "news", b"after")

        await wait_for(heard_after, timeout=30, step=0.05)
        with trio.fail_after(10):
            got = await sub.receive()
        assert got == Message("news", b"after")
