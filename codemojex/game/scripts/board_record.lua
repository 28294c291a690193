-- board_record: keep a player's best percentage on a room's leaderboard, atomically, and tell
-- the live feed. Scores pack the percentage with the time it was first reached, so equal
-- percentages rank the earlier best first: score = pct * 1e13 + (1e13 - 1 - t), t in ms since
-- 2024-01-01, the id epoch (ID_EPOCH_MS, server clock). ZADD GT keeps only improvements (an
-- equal later best is smaller). Uses the bus's public prelude (now_ms, ID_EPOCH_MS).
-- KEYS[1] cm:{<room>}:board
-- ARGV[1] player id, ARGV[2] percentage (0-100), ARGV[3] feed channel, ARGV[4] room id
-- Returns {1 improved | 0 not, best percentage}.
local since = now_ms() - ID_EPOCH_MS
local score = tonumber(ARGV[2]) * 1e13 + (1e13 - 1 - since)
local changed = redis.call('ZADD', KEYS[1], 'GT', 'CH', string.format('%.0f', score), ARGV[1])
local best = math.floor(tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1])) / 1e13)
if changed == 1 then redis.call('PUBLISH', ARGV[3], ARGV[4]) end
return {changed, best}
