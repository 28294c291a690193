"""The key schema: one declaration of every key of a queue, and nothing else spells one.

On a real server, every key the bus leaves behind after every kind of transition is a declared
one, of its declared Redis type, and every declared key is used.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from codemojex.notify.rate_limiter import RateLimiter
from echomq_trio import Bus, audit, flows, jobs, lanes, open_bus, repeat
from echomq_trio._replies import as_text
from echomq_trio.keys import SCHEMA, queue_keys

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
KEY_PREFIX_LITERAL = "emq:" + "{"  # spelled in two parts so this file is no hit of its own


def test_app_keys_live_in_the_queue_s_slot_and_are_checked() -> None:
    k = queue_keys("cm.notify")
    assert k.app("rate:") == "emq:{cm.notify}:app:rate:"
    assert k.app("migrated") == "emq:{cm.notify}:app:migrated"
    for bad in ("", "a b", "x{y}", "x" * 129, "line\n", 5):
        with pytest.raises(ValueError, match="app key name"):
            k.app(bad)  # type: ignore[arg-type]


def test_variable_parts_are_checked() -> None:
    k = queue_keys("q")
    with pytest.raises(ValueError, match="JOB"):
        k.job("NOT0KHTOWnGLuC")
    with pytest.raises(ValueError, match="lane group"):
        k.lane("a b")
    with pytest.raises(ValueError, match="idempotency key"):
        k.idempotency("")
    with pytest.raises(ValueError, match="repeat name"):
        k.registration("{x}")
    assert k.stream("events") == k.events and k.stream("audit") == k.audit
    for bad in ("pending", "nope", ""):
        with pytest.raises(ValueError, match="stream must be one of"):
            k.stream(bad)


def test_spec_of_tells_a_queue_s_keys_from_others() -> None:
    k = queue_keys("q")
    for key, name in [("emq:{q}:repeat", "repeats"), ("emq:{q}:repeat:digest", "registration"),
                      ("emq:{q}:groups", "lane_groups"), ("emq:{q}:g:x", "lane")]:  # fmt: skip
        spec = k.spec_of(key)
        assert spec is not None and spec.name == name, key
    for other in ("emq:{q}:nope", "emq:{q}:job:", "emq:{r}:pending", "cm:{q}:pending"):
        assert k.spec_of(other) is None, other


def _python_files() -> list[Path]:
    return [
        p
        for top in ("echomq_trio", "codemojex", "servicekit", "tools")
        for p in (ROOT / top).rglob("*.py")
    ]


def test_no_module_but_the_schema_spells_a_queue_key() -> None:
    hits = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in _python_files()
        if path != ROOT / "echomq_trio" / "keys.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if KEY_PREFIX_LITERAL in line
    ]
    assert hits == []
    assert len(_python_files()) > 40


def _module_of(path: Path) -> str:
    return ".".join(path.with_suffix("").relative_to(ROOT).parts).removesuffix(".__init__")


def test_no_private_imports_across_the_bus_s_modules() -> None:
    """A private name (``_x``) is imported by no other module, except between the private
    modules of one subpackage (``protocol._base`` to ``protocol._jobs``: the package's own
    parts). Private modules (``echomq_trio._leases``) are the package's internals, trio-style:
    imported within it, re-exported where public."""
    modules = {_module_of(p) for p in (ROOT / "echomq_trio").rglob("*.py")}
    crossing = []
    for path in (ROOT / "echomq_trio").rglob("*.py"):
        me = _module_of(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or node.module is None or node.level:
                continue
            home, _, leaf = node.module.rpartition(".")
            for alias in node.names:
                if not alias.name.startswith("_") or f"{node.module}.{alias.name}" in modules:
                    continue  # a public name, or a module
                within = home == me.rpartition(".")[0] != "echomq_trio" and leaf.startswith("_")
                if not within:
                    crossing.append(f"{me}: from {node.module} import {alias.name}")
    assert crossing == []


async def test_every_key_left_on_the_server_is_declared_with_its_type(
    standalone_only: str, queue: str
) -> None:
    # SCAN needs one server holding every key: the standalone one.
    async with open_bus(standalone_only) as bus:
        await _every_kind_of_transition(bus, queue)
        seen = await _declared_keys_of(bus, queue)
    assert set(seen) == {s.name for s in SCHEMA}, sorted({s.name for s in SCHEMA} - set(seen))


async def _every_kind_of_transition(bus: Bus, queue: str) -> None:
    k = bus.keys(queue)
    # Every kind of transition, so that every declared key exists at the end.
    await audit.enable(bus, queue)
    await jobs.enqueue(bus, queue, "flat", key="once")
    await jobs.enqueue_in(bus, queue, "later", 60_000)
    await jobs.enqueue(bus, queue, "quiet", debounce="d", debounce_ms=60_000)
    await jobs.enqueue(bus, queue, "expiring", expires_in=60_000)
    await lanes.enqueue(bus, queue, "chat", "a", limit=1)
    await lanes.enqueue(bus, queue, "chat", "b", seq=lanes.Seq("tg:chat", 1))
    await lanes.configure(bus, queue, "chat", weight=2)
    await lanes.enqueue(bus, queue, "paused", "p")
    await lanes.pause(bus, queue, "paused")
    await lanes.enqueue(bus, queue, "waits", "w")
    await lanes.pause_until(bus, queue, "waits", await bus.transport.server_time_ms() + 60_000)
    await repeat.register(bus, queue, "digest", 60_000, "t", first_in_ms=60_000)
    claimed = await jobs.claim(bus, queue, 2)
    flat = next(j for j in claimed if j.group is None)
    await jobs.retry(bus, queue, flat.id, flat.token, 0, 1, "boom")  # dead, audited
    in_lane = next(j for j in claimed if j.group is not None)
    await jobs.cancel(bus, queue, in_lane.id)  # kept as cancelled, its holder's mark left
    await audit.create_group(bus, queue, "reader")
    await audit.ack_and_trim(bus, queue, "reader", [])
    await RateLimiter(bus, tag=queue).take(42)
    await bus.transport.command("HSET", k.app("migrated"), "1", "2")  # as NotificationWorker does
    # The set of lane groups, as a version before counted = 2 left it (count_lanes reads it and
    # deletes it when it counts such a queue; this queue was counted from its start).
    await bus.transport.command("SADD", k.lane_groups, "chat")
    # The lane index by name, as a version before counted = 3 kept it (likewise).
    await bus.transport.command("ZADD", k.old_lane_index, "0", "chat")
    await jobs.enqueue(bus, queue, "flat again")  # the claim emptied the flat set
    await lanes.enqueue(bus, queue, "other", "o")  # "chat" at its limit left the ring
    await jobs.enqueue(bus, queue, "held")
    assert await jobs.claim(bus, queue, 1)  # one active again (the cancel took the last)
    # a flow's parent waits (parents) and keeps its ignored child's end (flow)
    ignored = flows.Flow("child", on_failure=flows.OnFailure.IGNORE)
    flow = await flows.add(bus, queue, flows.Flow("parent", [ignored, flows.Flow("other")]))
    await jobs.cancel(bus, queue, flow.root.children[0].id)


async def _declared_keys_of(bus: Bus, queue: str) -> dict[str, str]:
    """Every key of ``queue`` by its schema name; fails on an undeclared key or a wrong type."""
    k = bus.keys(queue)
    seen: dict[str, str] = {}
    cursor = "0"
    while True:
        cursor_raw, found = await bus.transport.command(
            "SCAN", cursor, "MATCH", k.prefix + "*", "COUNT", "1000"
        )
        for raw in found:
            key = as_text(raw)
            spec = k.spec_of(key)
            assert spec is not None, f"undeclared key {key}"
            kind = as_text(await bus.transport.command("TYPE", key))
            assert spec.type in (kind, "any"), f"{key} is a {kind}, declared {spec.type}"
            seen[spec.name] = key
        cursor = as_text(cursor_raw)
        if cursor == "0":
            return seen
