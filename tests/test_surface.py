"""The bus's public surface is deliberate: every module of ``echomq_trio`` without a leading
underscore is listed here with what a user reaches it for, so a new public module is a choice
made in review, not an accident; every public module of the three packages says what it exports
(``__all__``), and each name it lists is there."""

from __future__ import annotations

import importlib

import pytest

from tools.pythons import module_names

# The public modules of the bus, and why each is public.
BUS_SURFACE = {
    "echomq_trio": "open_bus, Bus, Consumer, Worker, Serve, the outcome words, the errors",
    "echomq_trio.__main__": "the echomq command",
    "echomq_trio.audit": "a queue's audit of settled jobs",
    "echomq_trio.backoff": "retry delay policies",
    "echomq_trio.bus": "Bus, and the raw command seam (Bus.command)",
    "echomq_trio.clock": "steps of the server clock, read by operators and the app",
    "echomq_trio.consumer": "Consumer and its settings",
    "echomq_trio.cron": "cron expressions in a time zone, for recurring schedules",
    "echomq_trio.dashboard": "the bus dashboard, to serve or mount",
    "echomq_trio.dashboard.app": "the dashboard's ASGI app",
    "echomq_trio.dashboard.view": "the dashboard's pure view model",
    "echomq_trio.demo": "python -m echomq_trio.demo",
    "echomq_trio.durability": "when a call returns (InMemory, OnDisk, Replicas)",
    "echomq_trio.errors": "the bus's exceptions",
    "echomq_trio.events": "a queue's event stream",
    "echomq_trio.flows": "jobs that wait for other jobs (a parent after its children)",
    "echomq_trio.ids": "branded job ids",
    "echomq_trio.jobs": "one function per job transition",
    "echomq_trio.keys": "the key schema, for an app's scripts that share a queue's slot",
    "echomq_trio.lanes": "fair lanes per group",
    "echomq_trio.lua": "loading an app's own scripts with the bus's prelude",
    "echomq_trio.memory": "how full the server is",
    "echomq_trio.metrics": "Prometheus metrics",
    "echomq_trio.metronome": "Metronome",
    "echomq_trio.partitions": "a queue spread over several hash slots (a cluster's primaries)",
    "echomq_trio.protocol": "each script's Call, for Bus.run and pipelines",
    "echomq_trio.queues": "listing queues",
    "echomq_trio.repair": "echomq repair and restore",
    "echomq_trio.repeat": "recurring schedules",
    "echomq_trio.resp": "the bus's own transport on trio streams",
    "echomq_trio.results": "the typed answers of the scripts",
    "echomq_trio.retention": "how long dead jobs and events are kept",
    "echomq_trio.sequence": "numbered streams",
    "echomq_trio.server": "the embedded server",
    "echomq_trio.settlement": "what a handler's result does, pure",
    "echomq_trio.states": "the job state machine",
    "echomq_trio.storage": "whether the server can write its data",
    "echomq_trio.testing": "FaultyTransport, for users' tests",
    "echomq_trio.transport": "the Transport protocol, ConnectionSpec",
    "echomq_trio.wire": "the valkey-glide transport",
    "echomq_trio.worker": "Worker and Serve",
}
PROGRAMS = {"echomq_trio.__main__", "echomq_trio.demo"}


def _public(name: str) -> bool:
    return not any(part.startswith("_") and part != "__main__" for part in name.split("."))


def test_the_bus_s_public_modules_are_the_listed_ones() -> None:
    public = {n for n in module_names() if n.startswith("echomq_trio") and _public(n)}
    assert public - BUS_SURFACE.keys() == set(), "a new public module: list it, or underscore it"
    assert BUS_SURFACE.keys() - public == set(), "listed but gone: take it off the list"


@pytest.mark.parametrize("name", sorted(n for n in module_names() if _public(n)))
def test_each_public_module_says_what_it_exports(name: str) -> None:
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    if exported is None:
        # a program, or a package's docstring alone
        assert name in PROGRAMS or name.split(".")[-1] in {"codemojex", "servicekit"}, name
        return
    missing = [n for n in exported if not hasattr(module, n)]
    assert missing == [], f"{name}.__all__ names what it lacks: {missing}"
