-- rate_sent: a send taken from rate_take got its answer: its entry in the logs is re-stamped
-- with the answer's time (rounded up to the ms) less the margin, so a window counts from when the message is known to
-- have arrived (before its answer) instead of assuming the margin's worth of trip.
-- KEYS[1] <prefix>global (the chat's log derives from ARGV[1], same slot)
-- ARGV[1] key prefix (the queue's app key `rate:`, as for rate_take), ARGV[2] chat id,
-- ARGV[3] the send's entry (rate_take's member), ARGV[4] safety margin ms, ARGV[5] global
-- window ms, ARGV[6] chat window ms
-- cost: O(log n) in the entries of the two logs
-- Returns the number of logs that still held the entry (0 to 2); an entry already trimmed
-- (its window long past) is left alone.
local now = now_ms()
local margin = tonumber(ARGV[4])
local logs = {{KEYS[1], tonumber(ARGV[5])}, {ARGV[1] .. 'chat:' .. ARGV[2], tonumber(ARGV[6])}}
local held = 0
for _, log in ipairs(logs) do
  local key, window = log[1], log[2] + margin
  if redis.call('ZSCORE', key, ARGV[3]) then
    held = held + 1
    redis.call('ZADD', key, now + 1 - margin, ARGV[3])  -- +1: now_ms rounds down
    if redis.call('PTTL', key) < window then redis.call('PEXPIRE', key, window) end
  end
end
return held
