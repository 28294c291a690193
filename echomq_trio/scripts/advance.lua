-- advance: move one registration to its next run anchored to its schedule (for callers that
-- pump repeats by hand with `due`; the metronome uses `fire`).  registered -> registered
-- KEYS[1] emq:{q}:repeat (other keys derive from ARGV[1], same slot)
-- ARGV[1] queue prefix, ARGV[2] name
-- Returns the next run in server ms, or -1 when the registration is absent (its entry is
-- dropped).
local qp = ARGV[1]
local name = ARGV[2]
local every = redis.call('HGET', qp .. 'repeat:' .. name, 'every_ms')
if not every then
  redis.call('ZREM', KEYS[1], name)
  return -1
end
every = tonumber(every)
local now = now_ms()
local at = tonumber(redis.call('ZSCORE', KEYS[1], name) or now)
local nxt = at + every * (math.floor((now - at) / every) + 1)
if nxt <= at then nxt = at + every end
redis.call('ZADD', KEYS[1], nxt, name)
return nxt
