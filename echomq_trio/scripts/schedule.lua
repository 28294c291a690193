-- schedule: admit jobs to run at a time (enqueue_at) or after a delay (enqueue_in).
-- (none) -> scheduled
-- KEYS[1] schedule   KEYS[2] tick
-- ARGV[1] job key prefix, ARGV[2] 'at' (times are absolute Unix ms) or 'in' (delays in ms from
-- the server's now), then triples ARGV[3k] job id, ARGV[3k+1] payload, ARGV[3k+2] time or delay
-- Returns one integer per job, in order: the run-at in server ms, or -1 for a duplicate.
local prefix = ARGV[1]
local relative = ARGV[2] == 'in'
local now = now_ms()
local out = {}
local earliest = nil
for i = 3, #ARGV, 3 do
  local id = ARGV[i]
  local row = prefix .. id
  if redis.call('EXISTS', row) == 1 then
    out[#out + 1] = -1
  else
    local at = tonumber(ARGV[i + 2])
    if relative then at = now + at end
    redis.call('HSET', row, 'state', 'scheduled', 'attempts', 0, 'payload', ARGV[i + 1])
    redis.call('ZADD', KEYS[1], at, id)
    if earliest == nil or at < earliest then earliest = at end
    out[#out + 1] = at
  end
end
if earliest ~= nil then
  local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if tonumber(head[2]) >= earliest then tick(KEYS[2]) end
end
return out
