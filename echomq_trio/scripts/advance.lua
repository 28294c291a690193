-- advance: move one registration to its next run anchored to its schedule (for callers that
-- pump repeats by hand with `due`; the metronome uses `fire`). A cron registration moves only
-- to the next run the caller computed (ARGV[3]), and only from the run it read (ARGV[4]):
-- compare-and-set, as in fire.
-- transition: registered -> registered
-- KEYS[1] emq:{q}:repeat (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] name, ARGV[3] a cron registration's next run in server
-- ms ('' for an every-ms one), ARGV[4] the run it was computed from
-- Returns the next run in server ms, or -1 when the registration is absent (its entry is
-- dropped); a cron registration not at ARGV[4] (another caller moved it) or given no next run
-- is not moved, and its present run is returned.
-- cost: O(log n)
local qp = ARGV[1]
local name = ARGV[2]
local reg = fields(qp .. KEY.registration .. name, 'every_ms', 'cron', 'template')
if not reg.template then
  redis.call('ZREM', KEYS[1], name)
  return -1
end
local now = now_ms()
local at = tonumber(redis.call('ZSCORE', KEYS[1], name) or now)
local nxt
if reg.cron then
  local want = tonumber(ARGV[3])
  if not want or at ~= tonumber(ARGV[4]) or want <= at then return at end
  nxt = want
else
  nxt = next_run(at, tonumber(reg.every_ms), now)
end
redis.call('ZADD', KEYS[1], nxt, name)
return nxt
