-- advance: move one registration to its next run anchored to its schedule (for callers that
-- pump repeats by hand with `due`; the metronome uses `fire`).
-- transition: registered -> registered
-- KEYS[1] emq:{q}:repeat (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] name
-- Returns the next run in server ms, or -1 when the registration is absent (its entry is
-- dropped).
-- cost: O(log n)
local qp = ARGV[1]
local name = ARGV[2]
local every = redis.call('HGET', qp .. KEY.registration .. name, 'every_ms')
if not every then
  redis.call('ZREM', KEYS[1], name)
  return -1
end
local now = now_ms()
local at = tonumber(redis.call('ZSCORE', KEYS[1], name) or now)
local nxt = next_run(at, tonumber(every), now)
redis.call('ZADD', KEYS[1], nxt, name)
return nxt
