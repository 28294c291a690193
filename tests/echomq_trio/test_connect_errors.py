"""Connecting: each way of not reaching a server is its own one-line ``ConnectionLost`` naming the
address (never the password), and a refused port fails at once rather than after the client
library's connection timeout. Every case is real: a closed port, an unresolvable name, a
plain-text server spoken to in TLS, a TLS server, wrong credentials on the test server."""

import contextlib
import datetime
import ssl
from functools import partial
from pathlib import Path

import pytest
import trio
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from echomq_trio import AuthenticationFailed, ConnectionLost, open_bus
from echomq_trio.server import free_port
from echomq_trio.wire import DEFAULT_CONNECT_TIMEOUT_MS, open_wire, parse_url

SECRET = "hunter2-not-shown"


async def _failure(url: str) -> tuple[ConnectionLost, float]:
    """The error of opening a bus on ``url``, and how long it took to come."""
    start = trio.current_time()
    with pytest.raises(ConnectionLost) as info:
        async with open_bus(url):
            pass
    return info.value, trio.current_time() - start


def _one_line_without_secret(exc: BaseException, secret: str = SECRET) -> str:
    text = str(exc)
    assert "\n" not in text and secret not in text, text
    return text


async def test_a_refused_port_says_so_at_once() -> None:
    port = free_port()
    exc, took = await _failure(f"redis://:{SECRET}@127.0.0.1:{port}")
    text = _one_line_without_secret(exc)
    assert f"connection refused by 127.0.0.1:{port}: is the server running?" in text
    assert text.startswith(f"cannot connect to redis://:***@127.0.0.1:{port}/0")
    assert not isinstance(exc, AuthenticationFailed)
    # The client library alone reports "timed out" after its connection timeout.
    assert took < 2.5 < DEFAULT_CONNECT_TIMEOUT_MS / 1000, took


async def test_an_unknown_host_says_it_cannot_be_resolved() -> None:
    exc, _ = await _failure(f"redis://:{SECRET}@no-such-host.invalid:6379")
    text = _one_line_without_secret(exc)
    assert "cannot resolve host 'no-such-host.invalid'" in text


async def test_tls_to_a_plain_text_port_suggests_redis_scheme(standalone_url: str) -> None:
    spec = parse_url(standalone_url)
    assert spec.password is not None
    exc, _ = await _failure("rediss://" + standalone_url.removeprefix("redis://"))
    text = _one_line_without_secret(exc, spec.password)
    host, port = spec.hosts[0]
    assert f"{host}:{port} does not speak TLS: use redis://" in text
    assert text.startswith("cannot connect to rediss://")


async def test_a_tls_port_is_not_called_plain_text(
    nursery: trio.Nursery, tls_server_context: ssl.SSLContext
) -> None:
    # A real TLS listener that completes handshakes and then hangs up: the probe must let it
    # through (whatever the client library then says, it is not "does not speak TLS").
    async def handshake_then_close(stream: trio.SocketStream) -> None:
        tls = trio.SSLStream(stream, tls_server_context, server_side=True)
        with contextlib.suppress(trio.BrokenResourceError):  # a client that gave up
            await tls.do_handshake()
        await trio.aclose_forcefully(tls)

    listeners = await nursery.start(
        partial(trio.serve_tcp, handshake_then_close, 0, host="127.0.0.1")
    )
    port = listeners[0].socket.getsockname()[1]
    exc, _ = await _failure(f"rediss://:{SECRET}@127.0.0.1:{port}")
    text = _one_line_without_secret(exc)
    assert "does not speak TLS" not in text and "refused" not in text
    assert f"127.0.0.1:{port}" in text


async def test_a_wrong_password_is_an_authentication_failure(standalone_url: str) -> None:
    spec = parse_url(standalone_url)
    assert spec.password is not None
    host, port = spec.hosts[0]
    exc, _ = await _failure(f"redis://:{SECRET}@{host}:{port}")
    text = _one_line_without_secret(exc)
    assert isinstance(exc, AuthenticationFailed)
    assert "authentication failed: wrong username or password" in text
    exc, _ = await _failure(f"redis://{host}:{port}")
    assert isinstance(exc, AuthenticationFailed)
    assert "authentication failed: the server requires a password" in str(exc)


async def test_a_cluster_fails_only_when_no_seed_answers(server_url: str) -> None:
    closed = free_port()
    exc, took = await _failure(f"redis://:{SECRET}@127.0.0.1:{closed},no-such-host.invalid:7000")
    text = _one_line_without_secret(exc)
    assert f"connection refused by 127.0.0.1:{closed}" in text
    assert "cannot resolve host 'no-such-host.invalid'" in text
    assert took < 2.5, took
    spec = parse_url(server_url)
    if not spec.cluster:
        return  # the rest needs the cluster's seeds
    assert spec.password is not None
    seeds = ",".join(f"{h}:{p}" for h, p in (("127.0.0.1", closed), *spec.hosts))
    async with open_wire(f"redis://:{spec.password}@{seeds}") as wire:
        assert await wire.command("PING") == b"PONG"


@pytest.fixture
def tls_server_context(tmp_path: Path) -> ssl.SSLContext:
    """A server context with a fresh self-signed certificate for 127.0.0.1."""
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
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    return ctx
