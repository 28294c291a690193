-- round_start: open a round in a room, atomically.
-- transition: (no round open) -> open
-- KEYS[1] room: cm:{<room>}:room (the room record), KEYS[2] round: cm:{<room>}:round:<round>
-- (the new round), KEYS[3] round_stem: cm:{<room>}:round: (a round the room points at already
-- is KEYS[3] .. its id); one slot
-- ARGV[1] round id, ARGV[2] secret (six emojis), ARGV[3] ms from the server's now to the start,
-- ARGV[4] feed channel, ARGV[5] room id, ARGV[6] how long the round is meant to last in ms,
-- from its start ('' or absent: not said; the round ends when end_round is called), ARGV[7]
-- the forum topic (message_thread_id) its notices go to ('' or absent: none), ARGV[8] the sum
-- of the server clock's steps recorded so far (jobs.clock_total; '' or absent: 0), kept as
-- clock_total so the round's times are read across later steps (rounds.py)
-- Creates the round hash (secret, starts_at_ms, status open, opened_ms, ends_at_ms when
-- ARGV[6] is given: what the live page counts down to, thread when ARGV[7] is), points the room
-- at it and publishes the room id on the channel (the live page shows the new, empty board), or
-- changes nothing: this script is the only writer of a round's opening. An open round has no
-- lifetime (a room has at most one); round_end gives it one.
-- cost: O(1)
-- Returns {outcome = 'opened', starts_at_ms}; {outcome = 'open', round: the open round's id}
-- refused, a round is open; {outcome = 'no_room'} refused, no such room.
if redis.call('EXISTS', KEYS[1]) == 0 then return {'outcome', 'no_room'} end
local cur = redis.call('HGET', KEYS[1], 'round')
if cur then
  local open = redis.call('HGET', KEYS[3] .. cur, 'status')
  if open == 'open' then return {'outcome', 'open', 'round', cur} end
end
local now = now_ms()
local at = now + tonumber(ARGV[3])
redis.call('HSET', KEYS[2], 'secret', ARGV[2], 'starts_at_ms', at, 'status', 'open',
  'opened_ms', now)
if ARGV[6] and ARGV[6] ~= '' then
  redis.call('HSET', KEYS[2], 'ends_at_ms', at + tonumber(ARGV[6]))
end
if ARGV[7] and ARGV[7] ~= '' then redis.call('HSET', KEYS[2], 'thread', ARGV[7]) end
if ARGV[8] and ARGV[8] ~= '' then redis.call('HSET', KEYS[2], 'clock_total', ARGV[8]) end
redis.call('HSET', KEYS[1], 'round', ARGV[1])
redis.call('PUBLISH', ARGV[4], ARGV[5])
return {'outcome', 'opened', 'starts_at_ms', at}
