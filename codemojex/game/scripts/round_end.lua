-- round_end: close a room's open round, atomically, and give it a lifetime.  open -> ended
-- KEYS[1] cm:{<room>}:room (the room record; the round is cm:{<room>}:round:<id> and its board
-- cm:{<room>}:board:round:<id>, both derived from KEYS[1]'s tag, same slot)
-- ARGV[1] ms the ended round and its board are kept, ARGV[2] feed channel, ARGV[3] room id
-- Marks the round ended (status, ended_ms), clears the room's pointer to its open round and
-- points `last` at it, sets the round and its board to expire after ARGV[1] ms, and publishes the
-- room id on the channel, in one step: this script is the only writer of a round's end. Of
-- concurrent calls exactly one finds the round open and ends it; the others find none. A pointer
-- left at a round that is not open is cleared.
-- cost: O(1)
-- Returns {1, round id, secret, forum topic or ''} ended by this call; {0} no round was open.
if string.sub(KEYS[1], -5) ~= ':room' then
  return redis.error_reply('ERR round_end: KEYS[1] must be cm:{<room>}:room')
end
local cur = redis.call('HGET', KEYS[1], 'round')
if not cur then return {0} end
redis.call('HDEL', KEYS[1], 'round')
local tag = string.sub(KEYS[1], 1, -5)
local rk = tag .. 'round:' .. cur
local f = redis.call('HMGET', rk, 'status', 'secret', 'thread')
if f[1] ~= 'open' then return {0} end
redis.call('HSET', rk, 'status', 'ended', 'ended_ms', now_ms())
redis.call('HSET', KEYS[1], 'last', cur)
redis.call('PEXPIRE', rk, ARGV[1])
redis.call('PEXPIRE', tag .. 'board:round:' .. cur, ARGV[1])
redis.call('PUBLISH', ARGV[2], ARGV[3])
return {1, cur, f[2], f[3] or ''}
