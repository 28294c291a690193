"""``ChatGame``: the consumer of ``cm.updates`` that plays the game in Telegram chats.

Each job is an update (``intake.admit``) or a round's scheduled end. A chat's jobs are one lane
of limit 1, so a chat's updates are handled one at a time in Telegram's order while other chats
go on. What an update means is decided by ``meaning`` (pure); here it is acted on:

* ``/newgame`` or ``/start`` in a group opens the chat's room (``directory.open_room``);
* ``/round`` starts a round (``rounds.start_round``, which announces it) and schedules its end
  on the chat's lane, ``round_ms`` after it starts; asked while a round is in play, it says when
  that one ends (and makes sure its end is scheduled);
* a guess in a room with a round in play is scored (``rounds.guess``: the player's score comes
  in their private chat); emoji sent when no round is in play are conversation;
* ``/top`` shows the board of the round in play (or the last one), ``/me`` the sender's
  standing in it, ``/help`` (and anything in a private chat) the help;
* the service messages of a group's upgrade to a supergroup move the chat's room to the new id
  (``directory.follow_migration``; the notification worker calls the same script when a send to
  the old id is answered with the move), so the game, its board and ``/top`` go on there.

Every text is built for how it is sent (``codemojex.game.texts``): the boards as HTML with
the names escaped, everything else plain with the names as written. An answer to a message in
a forum topic goes to that topic (``message_thread_id``), and so do the notices of a round
started there.

Every sender of a command or guess is a player from the first contact on
(``directory.player_for``). Every answer goes out through ``notify`` (rate limits, lanes,
audit, retries), keyed by the update, so a handler run again after a crash (its job comes back
when the lease expires) answers once and scores once; a round's end is a job whose id comes from
the round's, scheduled once.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping

import attrs
import trio

from codemojex import ids
from codemojex.chat.directory import follow_migration, open_room, player_for, room_of_chat
from codemojex.chat.intake import UPDATES_QUEUE, reply_seq
from codemojex.chat.meaning import Chat, Command, Guess, Ignored, Upgraded, meaning, update_id_of
from codemojex.game import board
from codemojex.game.rooms import get_room, player_names
from codemojex.game.rounds import (
    ENDED_ROUND_KEEP_MS,
    Round,
    current_round,
    end_round,
    guess,
    latest_round,
    standings_text,
    start_round,
)
from codemojex.game.rules import TOP_N, GameError
from codemojex.game.scoring import ALPHABET, SIZE
from codemojex.game.texts import Text, plain
from codemojex.notify.notifier import NOTIFY_QUEUE, notify
from codemojex.stats import added
from codemojex.store import server_time_ms
from echomq_trio import Bury, Bus, Job, Seq, Serve, Worker, jobs
from echomq_trio.metrics import BusMetrics

__all__ = ["ChatGame", "ChatStats", "group_help", "private_help"]

log = logging.getLogger("codemojex.chat.handler")

ROUND_MS = 120_000  # how long a round started in a chat lasts
START_IN_MS = 5_000  # from /round to the start: time to read the announcement


def group_help(bot_username: str) -> Text:
    return plain(
        "🎯 codemojex: guess the 6 secret emojis, in order.\n"
        "/newgame: start playing in this chat\n"
        "/round: start a round\n"
        "/top: the round's board · /me: your standing\n"
        f"To guess, send {SIZE} of these emojis as a message: {''.join(ALPHABET)}\n"
        f"Your scores come in a private chat with @{bot_username}: open it and press Start."
    )


def private_help(bot_username: str) -> Text:
    return plain(
        "🎯 codemojex is played in groups: add me to a group and send /newgame there, then "
        f"/round. Your scores for each guess will come here. Emojis: {''.join(ALPHABET)}"
    )


@attrs.frozen
class ChatStats:
    updates: int = 0
    commands: int = 0
    guesses: int = 0
    ignored: int = 0
    rounds_ended: int = 0
    upgrades: int = 0  # service messages of a group's upgrade to a supergroup


class ChatGame:
    """Serve it in a ``Worker`` with ``game.serve()`` (its consumer and the queue's metronome), or
    run its consumer alone with ``nursery.start(game.run)`` (a metronome for the queue runs
    elsewhere); cancel to stop (updates in hand go back)."""

    def __init__(
        self,
        bus: Bus,
        bot_id: int,
        bot_username: str,
        *,
        queue: str = UPDATES_QUEUE,
        notify_queue: str = NOTIFY_QUEUE,
        concurrency: int = 16,
        round_ms: int = ROUND_MS,
        start_in_ms: int = START_IN_MS,
        keep_ms: int = ENDED_ROUND_KEEP_MS,
        metrics: BusMetrics | None = None,
    ) -> None:
        self.bus = bus
        self.bot_id = bot_id
        self.bot_username = bot_username
        self.queue = queue
        self.notify_queue = notify_queue
        self.round_ms = round_ms
        self.start_in_ms = start_in_ms
        self.keep_ms = keep_ms
        self.concurrency = concurrency
        self.metrics = metrics
        self._stats = ChatStats()

    def statistics(self) -> ChatStats:
        return self._stats

    def serve(self, *, metronome: bool = True) -> Serve:
        """The queue as a ``Worker`` serves it: this game's handler, ``concurrency`` handler
        tasks, and (``metronome``) the queue's metronome, which ends the rounds on time."""
        return Serve(self.queue, self.handle, concurrency=self.concurrency, metronome=metronome)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The consumer alone, until cancelled (``metrics`` given to it)."""
        worker = Worker(self.bus, [self.serve(metronome=False)], metrics=self.metrics)
        await worker.run(task_status=task_status)

    async def handle(self, job: Job) -> Bury | None:
        try:
            body = json.loads(job.payload)
            if not isinstance(body, Mapping):
                raise ValueError("not a JSON object")
            if "end_round" in body:
                await self._end(body["end_round"])
                return None
            update_id = update_id_of(body)
        except (ValueError, KeyError, TypeError) as exc:
            return Bury(f"not an update: {exc}")
        self._stats = added(self._stats, updates=1)
        what = meaning(body, self.bot_username)
        if isinstance(what, Ignored):
            self._stats = added(self._stats, ignored=1)
            log.debug("update %s ignored: %s", update_id, what.reason)
            return None
        if isinstance(what, Upgraded):
            try:
                moved = await follow_migration(self.bus, what.old, what.new,
                                               queue=self.notify_queue)  # fmt: skip
            except ValueError as exc:  # ids no upgrade has (such as 0): nothing to follow
                return Bury(f"not an upgrade: {exc}")
            self._stats = added(self._stats, upgrades=1)  # followed (counted once done)
            log.info("chat %s was upgraded to %s (room %s)", what.old, moved.new, moved.room)
            return None
        key = reply_seq(self.bot_id, what.chat.id, update_id)
        try:
            if isinstance(what, Guess):
                await self._guess(what, key)
            else:
                await self._command(what, key)
        except GameError as exc:  # a move the game refuses: say why
            await self._reply(what.chat, plain(str(exc)), key)
        return None

    async def _reply(self, chat: Chat | int, text: Text, key: Seq) -> None:
        """``text`` to ``chat``: in the forum topic of the message answered (a ``Chat``), or to
        a private chat (its id)."""
        to, thread = (chat, None) if isinstance(chat, int) else (chat.id, chat.thread)
        await notify(self.bus, to, text.body, text.opts(thread), queue=self.notify_queue,
                     key=key)  # fmt: skip

    async def _room_of(self, chat: int) -> str | None:
        return await room_of_chat(self.bus, chat, queue=self.notify_queue)

    async def _guess(self, what: Guess, key: Seq) -> None:
        player = await player_for(self.bus, what.sender)
        room = await self._room_of(what.chat.id)
        if room is None:
            self._stats = added(self._stats, ignored=1)
            return
        try:
            await current_round(self.bus, room)
        except GameError:  # no round in play: emoji in a chat are conversation
            self._stats = added(self._stats, ignored=1)
            return
        self._stats = added(self._stats, guesses=1)
        try:
            await guess(self.bus, room, player.id, what.text, key=key)
        except GameError as exc:  # to the player alone, as their scores are
            await self._reply(player.chat, plain(f"{what.chat.title}: {exc}"), key)

    async def _command(self, what: Command, key: Seq) -> None:
        self._stats = added(self._stats, commands=1)
        chat = what.chat
        player = await player_for(self.bus, what.sender)
        if chat.private:
            await self._reply(chat, private_help(self.bot_username), key)
            return
        if what.name in ("newgame", "start"):
            room, made = await open_room(self.bus, chat, queue=self.notify_queue)
            title = (await get_room(self.bus, room)).title
            said = f"🎮 {title} plays codemojex now!\n" if made else f"{title} already plays.\n"
            await self._reply(chat, plain(said + group_help(self.bot_username).body), key)
            return
        if what.name == "help":
            await self._reply(chat, group_help(self.bot_username), key)
            return
        room_id = await self._room_of(chat.id)
        if room_id is None:
            await self._reply(chat, plain("No game in this chat yet: /newgame starts one."), key)
            return
        if what.name == "round":
            await self._round(chat, room_id, key)
        elif what.name == "top":
            await self._reply(chat, await self._top(room_id), key)
        elif what.name == "me":
            await self._reply(chat, await self._me(room_id, player.id, player.name), key)

    async def _round(self, chat: Chat, room_id: str, key: Seq) -> None:
        try:
            rnd = await start_round(self.bus, room_id, starts_in_ms=self.start_in_ms,
                                    lasts_ms=self.round_ms, thread=chat.thread)  # fmt: skip
        except GameError:  # one is open already (else this raises what is wrong)
            rnd = await current_round(self.bus, room_id)
            ends_at = await self._schedule_end(chat.id, rnd)  # made sure of, after a crash
            left_s = max(0, (ends_at - await server_time_ms(self.bus)) // 1000)
            said = f"A round is already in play: it ends in {left_s} s."
            await self._reply(chat, plain(said), key)
            return
        await self._schedule_end(chat.id, rnd)
        said = f"The round lasts {self.round_ms // 1000} s: send {SIZE} emojis here to guess."
        await self._reply(chat, plain(said), key)

    async def _schedule_end(self, chat: int, rnd: Round) -> int:
        ends_at = rnd.starts_at_ms + self.round_ms
        end = json.dumps({"end_round": {"room": rnd.room, "round": rnd.id}})
        job_id = ids.JOB + rnd.id[len(ids.ROUND) :]  # one end per round: enqueue is idempotent
        # A wait of a length (enqueue_in): a step of the server clock does not move the end.
        wait = max(0, ends_at - await server_time_ms(self.bus))
        await jobs.enqueue_in(self.bus, self.queue, end, wait, job_id=job_id, group=str(chat))
        return ends_at

    async def _end(self, what: Mapping[str, str]) -> None:
        try:
            rnd = await current_round(self.bus, what["room"])
        except GameError:
            return  # ended already
        if rnd.id == what["round"]:
            try:
                await end_round(self.bus, rnd.room, keep_ms=self.keep_ms)
                self._stats = added(self._stats, rounds_ended=1)
            except GameError:
                return

    async def _top(self, room_id: str) -> Text:
        """The board as HTML (names escaped), or a plain line when there is none yet."""
        room = await get_room(self.bus, room_id)
        shown = await latest_round(self.bus, room_id)
        if shown is None:
            return plain(f"No round in {room.title} yet: /round starts one.")
        standings = await board.top(self.bus, board.round_board(room_id, shown.id), TOP_N)
        names = await player_names(self.bus, [s.player for s in standings])
        label = "in play" if shown.open else "ended"
        return standings_text(f"{room.title}, round {shown.id} ({label})", standings, names)

    async def _me(self, room_id: str, player: str, name: str) -> Text:
        """Plain: the name as written."""
        shown = await latest_round(self.bus, room_id)
        if shown is None:
            return plain(f"{name}: no round yet: /round starts one.")
        mine = await board.around(self.bus, board.round_board(room_id, shown.id), player, 0)
        if not mine:
            return plain(f"{name}: no score in round {shown.id} yet.")
        return plain(f"{name}: best {mine[0].percentage}% in round {shown.id}, "
                     f"rank {mine[0].rank}.")  # fmt: skip
