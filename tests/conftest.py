"""Test rules: every server is a real valkey/redis process started here on a free loopback port;
every async test runs under ``trio.fail_after`` (60 s, or ``@pytest.mark.timeout_s(N)``) so a
hang fails fast; waits poll a condition with a deadline, never a fixed sleep. A loop whose
logic is time (backoff, probes, windows) runs in virtual time where no server is the point:
pytest-trio's ``autojump_clock`` (``MockClock(autojump_threshold=0)``), its ``timeout_s`` in
virtual seconds. A long scenario is a parameter in the component's own units (an outage so many
leases long), not a literal minute. Helpers live in ``tests/support.py``; this file holds
fixtures and hooks.

Tiers. The ``bus``/``server_url`` fixtures give a standalone server; a test (or module) marked
``cluster`` runs on the 3-node cluster too. The cluster is only where slots matter: what the test
checks would differ on a cluster (a script's keys in one slot, commands routed to the node of
their key, lanes and claims across slots, failover, a scan over every primary, pub/sub across
nodes, the CLI or dashboard reading a cluster). The bus's modules are marked whole; an app
module (``codemojex``) marks only the tests that run each of its scripts, or read across
slots, plus one end-to-end test (``chat/test_play.py``, a round played in a group); the rest of
its logic is the same on either topology and runs standalone. A test that uses a server fixture
is marked ``server`` automatically; a module that starts servers or processes of its own says
so with ``server`` or ``slow`` (several processes, or tens of seconds in one). The fast tier,
``pytest -m "not server and not slow"`` (``just test-fast``), needs no server at all and runs
in seconds. ``ECHOMQ_TEST_TOPOLOGY`` (``standalone,cluster`` by default) narrows the topologies;
``ECHOMQ_TEST_TRANSPORT`` (``trio`` by default, or ``glide``) is the transport of the ``bus``
fixture."""

from __future__ import annotations

import functools
import inspect
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import hypothesis
import pytest
import trio

from echomq_trio import Bus, open_bus
from echomq_trio.server import (
    cluster_node_config,
    cluster_url,
    form_cluster,
    free_port,
)
from tests.support import (
    FAKETIME_LIBS,
    PASSWORD,
    SteppingServer,
    faketime_env,
    server_runs_under_faketime,
    start_test_server,
    stop_servers,
)

DEFAULT_TIMEOUT_S = 60

# Tests never assert timings: hypothesis's per-example deadline (200 ms) is one, and a loaded
# 2-core machine broke it now and then. The test's own fail_after still ends a hang.
hypothesis.settings.register_profile("suite", deadline=None)
hypothesis.settings.load_profile("suite")


SERVER_FIXTURES = {
    "server_url", "standalone_url", "cluster_url_", "standalone_only", "bus", "stepping_server"
}  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "timeout_s(n): fail the test after n seconds")
    config.addinivalue_line(
        "markers", "cluster: run on the 3-node cluster as well as on a standalone server"
    )
    config.addinivalue_line(
        "markers", "server: needs a real server (set automatically for the server fixtures)"
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "topology" in metafunc.fixturenames:
        both = metafunc.definition.get_closest_marker("cluster") is not None
        wanted = [t for t in _topology() if both or t == "standalone"]
        metafunc.parametrize("topology", wanted)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.server)
        fn = getattr(item, "obj", None)
        if fn is None or not inspect.iscoroutinefunction(fn):
            continue
        marker = item.get_closest_marker("timeout_s")
        limit = marker.args[0] if marker else DEFAULT_TIMEOUT_S

        def wrap(fn: Callable[..., Awaitable[Any]], limit: float) -> Callable[..., Any]:
            @functools.wraps(fn)
            async def run(*args: Any, **kwargs: Any) -> Any:
                with trio.fail_after(limit):
                    return await fn(*args, **kwargs)

            return run

        item.obj = wrap(fn, limit)  # type: ignore[attr-defined]


def _standalone(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[str]:
    """A standalone test server in a new folder ``name``, its URL for the block."""
    port = free_port()
    proc = start_test_server(tmp_path_factory.mktemp(name), [], port)
    try:
        yield f"redis://:{PASSWORD}@127.0.0.1:{port}"
    finally:
        stop_servers([proc])


@pytest.fixture(scope="session")
def standalone_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from _standalone(tmp_path_factory, "standalone")


@pytest.fixture(scope="session")
def cluster_url_(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("cluster")
    procs = []
    ports = []
    try:
        for i in range(3):
            folder = root / f"node{i}"
            port = free_port(with_bus_port=True)
            procs.append(start_test_server(folder, cluster_node_config(folder, PASSWORD), port))
            ports.append(port)
        urls = [f"redis://:{PASSWORD}@127.0.0.1:{p}" for p in ports]
        trio.run(form_cluster, urls, ports)
        yield cluster_url(PASSWORD, ports)
    finally:
        stop_servers(procs)


@pytest.fixture
def stepping_server(tmp_path: Path) -> Iterator[SteppingServer]:
    """A standalone server under libfaketime (the clock read afresh on every call, monotonic
    clock untouched), at the real time until the test calls ``step``."""
    if not FAKETIME_LIBS:
        pytest.fail("libfaketime is missing: apt-get install faketime (.ci/run installs it)")
    if not server_runs_under_faketime():
        pytest.skip("the server hangs under libfaketime (Debian's Redis 7.0 and its jemalloc)")
    offset = tmp_path / "faketime"
    offset.write_text("+0\n")
    port = free_port()
    proc = start_test_server(tmp_path / "server", [], port, faketime_env(offset))
    try:
        yield SteppingServer(f"redis://:{PASSWORD}@127.0.0.1:{port}", offset)
    finally:
        stop_servers([proc])


def _topology() -> list[str]:
    wanted = os.environ.get("ECHOMQ_TEST_TOPOLOGY", "standalone,cluster")
    return [t for t in wanted.split(",") if t]


@pytest.fixture
def server_url(request: pytest.FixtureRequest, topology: str) -> str:
    """The URL of a shared test server: standalone, and for ``cluster`` tests the 3-node
    cluster too."""
    name = "standalone_url" if topology == "standalone" else "cluster_url_"
    url: str = request.getfixturevalue(name)
    return url


@pytest.fixture
def standalone_only(standalone_url: str) -> str:
    return standalone_url


@pytest.fixture
def own_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A standalone server of this test's own, for a test whose ledger is a queue-wide count
    (``completed_total`` of an app's queue): on the shared server, what an earlier test left on
    that queue (an update its service was stopped before handling) is handled by this test's
    service and counted."""
    yield from _standalone(tmp_path_factory, "own-server")


def test_transport() -> str:
    """The transport the ``bus`` fixture opens (``ECHOMQ_TEST_TRANSPORT``, ``trio`` by
    default, as ``open_bus``'s)."""
    return os.environ.get("ECHOMQ_TEST_TRANSPORT", "trio")


test_transport.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test


@pytest.fixture
async def bus(server_url: str) -> AsyncIterator[Bus]:
    async with open_bus(server_url, transport=test_transport()) as b:
        yield b


@pytest.fixture
def queue() -> str:
    """A queue name no other test uses, so tests can share one server."""
    return "t." + uuid.uuid4().hex[:10]
