-- reap: return jobs whose lease expired (their worker died or hung) to pending, so another
-- worker claims them. Attempts are unchanged; the next claim raises them.  active -> pending
-- KEYS[1] active   KEYS[2] pending   KEYS[3] wake
-- ARGV[1] job key prefix, ARGV[2] batch
-- Returns {reaped, server now ms}.
local prefix = ARGV[1]
local now = now_ms()
local expired = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(expired) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZADD', KEYS[2], 0, id)
  redis.call('HSET', prefix .. id, 'state', 'pending')
end
wake(KEYS[3], #expired)
return {#expired, now}
