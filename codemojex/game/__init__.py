"""The game: rooms, players and rounds of six secret emojis, leaderboards, and the live page.

How the parts fit: ``rules`` (pure) holds the input limits and ``GameError``; ``scoring``
(pure) scores a guess. ``rooms`` keeps rooms and players in the server and lists rooms a page
at a time (``room_page``); ``rounds`` opens and closes rounds and takes guesses, sending their
notices through ``codemojex.notify``; ``digest`` sends every room its daily standings, a
recurring job on ``cm.game`` whose handler is ``game_handler``. ``board`` keeps a leaderboard
per round and per day in each room (``days``, pure, numbers the days) and publishes every
change; the ``Feed`` pushes the top 10 of each room's current round to websocket viewers
through a one-slot ``Latest`` mailbox each, and the ``PageServer`` (``page``) serves the live
page that shows it. ``demo`` plays a few rooms with simulated players. Rounds and boards expire
(``ENDED_ROUND_KEEP_MS``, ``DAY_BOARD_KEEP_MS``); rooms and players are bounded by the people
who play.
"""

from codemojex.game.board import DAY_BOARD_KEEP_MS, Board, Recorded, Standing
from codemojex.game.demo import play
from codemojex.game.digest import (
    DEFAULT_DIGEST_AT,
    DEFAULT_DIGEST_TZ,
    DIGEST_NAME,
    GAME_QUEUE,
    DigestIncomplete,
    Notify,
    digest_cron,
    digest_text,
    game_handler,
    register_digest,
    send_digest,
)
from codemojex.game.feed import Feed
from codemojex.game.latest import Latest
from codemojex.game.page import PageServer
from codemojex.game.rooms import (
    Player,
    Room,
    RoomPage,
    create_player,
    create_room,
    get_player,
    get_room,
    list_room_ids,
    migrate_room_index,
    move_room,
    player_names,
    room_page,
)
from codemojex.game.rounds import (
    ENDED_ROUND_KEEP_MS,
    GuessResult,
    LatestRound,
    Round,
    current_round,
    end_round,
    guess,
    latest_round,
    start_round,
)
from codemojex.game.rules import (
    DAY_MS,
    MAX_NAME,
    MAX_START_DELAY_MS,
    MAX_TITLE,
    TOP_N,
    GameError,
    check_label,
    clean_label,
)
from codemojex.game.scoring import Score, score

__all__ = [
    "DAY_BOARD_KEEP_MS",
    "DAY_MS",
    "DEFAULT_DIGEST_AT",
    "DEFAULT_DIGEST_TZ",
    "DIGEST_NAME",
    "ENDED_ROUND_KEEP_MS",
    "GAME_QUEUE",
    "MAX_NAME",
    "MAX_START_DELAY_MS",
    "MAX_TITLE",
    "TOP_N",
    "Board",
    "DigestIncomplete",
    "Feed",
    "GameError",
    "GuessResult",
    "Latest",
    "LatestRound",
    "Notify",
    "PageServer",
    "Player",
    "Recorded",
    "Room",
    "RoomPage",
    "Round",
    "Score",
    "Standing",
    "check_label",
    "clean_label",
    "create_player",
    "create_room",
    "current_round",
    "digest_cron",
    "digest_text",
    "end_round",
    "game_handler",
    "get_player",
    "get_room",
    "guess",
    "latest_round",
    "list_room_ids",
    "migrate_room_index",
    "move_room",
    "play",
    "player_names",
    "register_digest",
    "room_page",
    "score",
    "send_digest",
    "start_round",
]
