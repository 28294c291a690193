-- rate_sent: a send taken from rate_take got its answer: its entry in the logs is re-stamped
-- with the answer's time (rounded up to the ms) less the margin, so a window counts from when the message is known to
-- have arrived (before its answer) instead of assuming the margin's worth of trip.
-- transition: none (a send's entry stamped with its answer's time)
-- KEYS[1] rate_global: emq:{<queue>}:app:rate:global (the bot's log), KEYS[2] queue_meta: the
-- queue's meta (where steps of the server clock are recorded), KEYS[3] rate_clock:
-- emq:{<queue>}:app:rate:clock, KEYS[4] rate_pause_global: emq:{<queue>}:app:rate:pause:global,
-- KEYS[5] rate_pause_outage: emq:{<queue>}:app:rate:pause:outage, KEYS[6] rate_paused:
-- emq:{<queue>}:app:rate:paused, KEYS[7] rate_chats: emq:{<queue>}:app:rate:chats, KEYS[8]
-- rate_seq: emq:{<queue>}:app:rate:seq, KEYS[9] rate_chat_stem: emq:{<queue>}:app:rate:chat:
-- (a chat's log is KEYS[9] .. its id), KEYS[10] rate_reserved_stem: emq:{<queue>}:app:rate:rsv:
-- (a chat's reservation is KEYS[10] .. its id); one slot (every rate script takes these KEYS)
-- ARGV[1] chat id, ARGV[2] the send's entry (rate_take's member), ARGV[3] safety margin ms,
-- ARGV[4] global window ms, ARGV[5] chat window ms, ARGV[6..8] the caller's witness of the
-- server clock (as for rate_take)
-- Times are the limiter's own clock (rate_take explains it).
-- cost: O(log n) in the entries of the two logs
-- Returns {held = the number of logs that still held the entry (0 to 2)}; an entry already
-- trimmed (its window long past) is left alone.
local server_now = now_ms()
witness(KEYS[2], server_now, ARGV[6], ARGV[7], ARGV[8])
local now = steady_ms(KEYS[2], KEYS[3], server_now)
local margin = tonumber(ARGV[3])
local chat_key = KEYS[9] .. ARGV[1]
local held = 0
for _, key in ipairs({KEYS[1], chat_key}) do
  if redis.call('ZSCORE', key, ARGV[2]) then
    held = held + 1
    redis.call('ZADD', key, now + 1 - margin, ARGV[2])  -- +1: now_ms rounds down
  end
end
-- The chat's log is kept a window past its last entry (see rate_take).
if held > 0 then
  redis.call('ZADD', KEYS[7], 'GT', now + tonumber(ARGV[5]) + margin, ARGV[1])
end
return {'held', held}
