-- reap: return jobs whose lease expired (their worker died or hung) to pending or their lane,
-- so another worker claims them. Attempts are unchanged; the next claim raises them.
-- active -> pending
-- KEYS[1] emq:{q}:active (other keys derive from ARGV[1], same slot)
-- ARGV[1] queue prefix, ARGV[2] batch
-- Returns {reaped, server now ms}.
local qp = ARGV[1]
local now = now_ms()
local expired = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[2]))
local flat = 0
for _, id in ipairs(expired) do
  redis.call('ZREM', KEYS[1], id)
  local row = qp .. 'job:' .. id
  redis.call('HSET', row, 'state', 'pending')
  emit(qp, 'reaped', id)
  local g = redis.call('HGET', row, 'group')
  if g then
    lane_push(qp, g, id, now)
    lane_done(qp, g, now)
  else
    redis.call('ZADD', qp .. 'pending', 0, id)
    flat = flat + 1
  end
end
wake(qp, flat)
return {#expired, now}
