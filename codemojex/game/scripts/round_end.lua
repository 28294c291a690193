-- round_end: close a room's open round, atomically, and give it a lifetime.
-- transition: open -> ended
-- KEYS[1] room: cm:{<room>}:room (the room record), KEYS[2] round_stem: cm:{<room>}:round: (the
-- round is KEYS[2] .. its id), KEYS[3] round_board_stem: cm:{<room>}:board:round: (its board is
-- KEYS[3] .. its id); one slot
-- ARGV[1] ms the ended round and its board are kept, ARGV[2] feed channel, ARGV[3] room id
-- Marks the round ended (status, ended_ms), clears the room's pointer to its open round and
-- points `last` at it, sets the round and its board to expire after ARGV[1] ms, and publishes the
-- room id on the channel, in one step: this script is the only writer of a round's end. Of
-- concurrent calls exactly one finds the round open and ends it; the others find none. A pointer
-- left at a round that is not open is cleared.
-- cost: O(1)
-- Returns {outcome = 'ended', round: its id, secret, thread: the forum topic or ''} ended by this
-- call; {outcome = 'none_open'} no round was open.
local cur = redis.call('HGET', KEYS[1], 'round')
if not cur then return {'outcome', 'none_open'} end
redis.call('HDEL', KEYS[1], 'round')
local rk = KEYS[2] .. cur
local f = redis.call('HMGET', rk, 'status', 'secret', 'thread')
if f[1] ~= 'open' then return {'outcome', 'none_open'} end
redis.call('HSET', rk, 'status', 'ended', 'ended_ms', now_ms())
redis.call('HSET', KEYS[1], 'last', cur)
redis.call('PEXPIRE', rk, ARGV[1])
redis.call('PEXPIRE', KEYS[3] .. cur, ARGV[1])
redis.call('PUBLISH', ARGV[2], ARGV[3])
return {'outcome', 'ended', 'round', cur, 'secret', f[2], 'thread', f[3] or ''}
