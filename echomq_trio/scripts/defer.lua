-- defer: put a job back to wait, without spending an attempt (for example: no rate-limit
-- token yet). A lane job returns to the head of its lane and the whole lane waits until then,
-- so the job keeps its place; a flat job waits on the schedule.
-- active -> pending (lane, waiting) | scheduled
-- KEYS[1] emq:{q}:active (other keys derive from ARGV[1], same slot)
-- ARGV[1] queue prefix, ARGV[2] job id, ARGV[3] fencing token (lease number), ARGV[4] delay ms,
-- ARGV[5] reason
-- Returns 1 deferred, 0 stale (token mismatch or not active), -1 gone.
local qp = ARGV[1]
local id = ARGV[2]
local row = qp .. 'job:' .. id
local f = redis.call('HMGET', row, 'state', 'lease', 'group')
if not f[1] then return -1 end
if f[1] ~= 'active' or f[2] ~= ARGV[3] then return 0 end
local now = now_ms()
local at = now + tonumber(ARGV[4])
local g = f[3]
redis.call('ZREM', KEYS[1], id)
redis.call('HINCRBY', row, 'attempts', -1)
redis.call('HINCRBY', qp .. 'metrics', 'deferred', 1)
emit(qp, 'deferred', id, 'at', at, 'reason', ARGV[5])
if g then
  redis.call('HSET', row, 'state', 'pending')
  if at > now then lane_wait(qp, g, at) end
  lane_push(qp, g, id, now)
  lane_done(qp, g, now)
else
  redis.call('HSET', row, 'state', 'scheduled')
  schedule_at(qp, id, at)
end
return 1
