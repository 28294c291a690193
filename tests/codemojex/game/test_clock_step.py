"""A round in play when the server's clock steps an hour back (libfaketime on a server of the
test's own): its times are read as the clock reads after the step, so guesses are taken (not
refused as "the round starts in 3600 s"), and the page counts down what is left of the round,
not an hour more. The round's end and start reminder are waits of a length on the bus, carried
by the metronome (tests/echomq_trio/test_clock.py)."""

from __future__ import annotations

import pytest
import trio

from codemojex import game
from codemojex.game import rounds
from codemojex.notify.notifier import NOTIFY_QUEUE
from echomq_trio import Metronome, jobs, open_bus
from tests.support import SteppingServer, wait_for


@pytest.mark.timeout_s(60)
async def test_a_round_started_before_a_step_back_plays_on_and_ends_on_time(
    stepping_server: SteppingServer,
) -> None:
    async with open_bus(stepping_server.url) as bus:
        room = await game.create_room(bus, -1_000_777, "Clocks")
        player = await game.create_player(bus, "Ada", 10**9 + 777)
        rnd = await game.start_round(bus, room.id, starts_in_ms=0, lasts_ms=60_000)
        metronome = Metronome(bus, NOTIFY_QUEUE, beat_ms=100)
        async with trio.open_nursery() as nursery:
            await nursery.start(metronome.run)
            await wait_for(lambda: metronome.statistics().beats >= 2)
            await stepping_server.step(-3600)
            await wait_for(lambda: metronome.statistics().clock_steps == 1, timeout=10)
            nursery.cancel_scope.cancel()
        assert abs(await jobs.clock_total(bus, NOTIFY_QUEUE) + 3_600_000) < 2_000
        result = await game.guess(bus, room.id, player.id, "".join(rnd.secret))
        assert result.score.percentage == 100
        view = await rounds.round_view(bus, room.id, rnd.id)
        now = await bus.transport.server_time_ms()
        assert view is not None and view.ends_at_ms is not None
        assert 0 < view.ends_at_ms - now <= 60_000  # not an hour more
        assert view.starts_at_ms <= now


@pytest.mark.timeout_s(60)
async def test_a_round_opened_after_a_step_back_keeps_its_own_times(
    stepping_server: SteppingServer,
) -> None:
    """The step is recorded before the round opens: its times are written on the new clock and
    read as written (the sum of the steps it noted has not grown since)."""
    async with open_bus(stepping_server.url) as bus:
        metronome = Metronome(bus, NOTIFY_QUEUE, beat_ms=100)
        async with trio.open_nursery() as nursery:
            await nursery.start(metronome.run)
            await wait_for(lambda: metronome.statistics().beats >= 2)
            await stepping_server.step(-3600)
            await wait_for(lambda: metronome.statistics().clock_steps == 1, timeout=10)
            nursery.cancel_scope.cancel()
        room = await game.create_room(bus, -1_000_778, "Later")
        player = await game.create_player(bus, "Bo", 10**9 + 778)
        rnd = await game.start_round(bus, room.id, starts_in_ms=60_000, lasts_ms=60_000)
        view = await rounds.round_view(bus, room.id, rnd.id)
        now = await bus.transport.server_time_ms()
        assert view is not None and view.ends_at_ms is not None
        assert 55_000 < view.starts_at_ms - now <= 60_000
        assert 115_000 < view.ends_at_ms - now <= 120_000
        with pytest.raises(game.GameError, match="the round starts in"):
            await game.guess(bus, room.id, player.id, "".join(rnd.secret))
