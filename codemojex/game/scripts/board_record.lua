-- board_record: offer a player's percentage in a room's open round: keep their best on the
-- round's board and on today's board, atomically, and tell the live feed.
-- transition: open -> open (a guess counted, bests kept)
-- KEYS[1] round: cm:{<room>}:round:<round> (the round; it must be open), KEYS[2] round_board:
-- cm:{<room>}:board:round:<round> (its board), KEYS[3] day_board_stem: cm:{<room>}:board:day:
-- (today's board is KEYS[3] .. n, n = floor(now_ms / 86400000): the UTC day of the server's
-- clock, as codemojex.game.days numbers days); one slot
-- cost: O(log n) in the players on the two boards
-- ARGV[1] player id, ARGV[2] percentage (0-100), ARGV[3] feed channel, ARGV[4] room id,
-- ARGV[5] ms today's board is kept after the day ends.
-- Scores pack the percentage with the time it was first reached, so equal percentages rank the
-- earlier best first: score = pct * 1e13 + (1e13 - 1 - t), t in ms since 2024-01-01, the id
-- epoch (ID_EPOCH_MS, server clock). ZADD GT keeps only improvements (an equal later best is
-- smaller). Today's board expires ARGV[5] ms after its day ends (set on every record); the
-- round's board gets its lifetime from round_end, and a round that is not open is refused, so
-- no board outlives its round. Publishes the room id on the channel when the round's best rose.
-- Counts the offer in the round's 'guesses' (what the live page shows as guesses so far).
-- Uses the bus's public prelude (now_ms, ID_EPOCH_MS).
-- Returns {outcome = 'recorded', improved: 1 | 0, best: the player's best in the round, day: n};
-- {outcome = 'not_open'} the round is not open (nothing written).
if redis.call('HGET', KEYS[1], 'status') ~= 'open' then return {'outcome', 'not_open'} end
redis.call('HINCRBY', KEYS[1], 'guesses', 1)
local now = now_ms()
local score = string.format('%.0f', tonumber(ARGV[2]) * 1e13 + (1e13 - 1 - (now - ID_EPOCH_MS)))
local changed = redis.call('ZADD', KEYS[2], 'GT', 'CH', score, ARGV[1])
local best = math.floor(tonumber(redis.call('ZSCORE', KEYS[2], ARGV[1])) / 1e13)
local day = math.floor(now / 86400000)
local today = KEYS[3] .. day
redis.call('ZADD', today, 'GT', score, ARGV[1])
redis.call('PEXPIREAT', today, (day + 1) * 86400000 + tonumber(ARGV[5]))
if changed == 1 then redis.call('PUBLISH', ARGV[3], ARGV[4]) end
return {'outcome', 'recorded', 'improved', changed, 'best', best, 'day', day}
