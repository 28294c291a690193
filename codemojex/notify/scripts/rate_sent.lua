-- rate_sent: a send taken from rate_take got its answer: its entry in the logs is re-stamped
-- with the answer's time (rounded up to the ms) less the margin, so a window counts from when the message is known to
-- have arrived (before its answer) instead of assuming the margin's worth of trip.
-- KEYS[1] <prefix>global, KEYS[2] the queue's meta (the chat's log derives from ARGV[1], same
-- slot)
-- ARGV[1] key prefix (the queue's app key `rate:`, as for rate_take), ARGV[2] chat id,
-- ARGV[3] the send's entry (rate_take's member), ARGV[4] safety margin ms, ARGV[5] global
-- window ms, ARGV[6] chat window ms, ARGV[7..9] the caller's witness of the server clock (as
-- for rate_take)
-- Times are the limiter's own clock (rate_take explains it).
-- cost: O(log n) in the entries of the two logs
-- Returns the number of logs that still held the entry (0 to 2); an entry already trimmed
-- (its window long past) is left alone.
local server_now = now_ms()
witness(KEYS[2], server_now, ARGV[7], ARGV[8], ARGV[9])
local now = steady_ms(KEYS[2], ARGV[1] .. 'clock', server_now)
local margin = tonumber(ARGV[4])
local chat_key = ARGV[1] .. 'chat:' .. ARGV[2]
local held = 0
for _, key in ipairs({KEYS[1], chat_key}) do
  if redis.call('ZSCORE', key, ARGV[3]) then
    held = held + 1
    redis.call('ZADD', key, now + 1 - margin, ARGV[3])  -- +1: now_ms rounds down
  end
end
-- The chat's log is kept a window past its last entry (see rate_take).
if held > 0 then
  redis.call('ZADD', ARGV[1] .. 'chats', 'GT', now + tonumber(ARGV[6]) + margin, ARGV[2])
end
return held
