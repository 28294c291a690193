-- promote: move scheduled jobs whose run-at has come to pending.  scheduled -> pending
-- KEYS[1] schedule   KEYS[2] pending   KEYS[3] wake
-- ARGV[1] job key prefix, ARGV[2] batch (most jobs moved by this call)
-- Returns {moved, next run-at in server ms or -1 when nothing is scheduled, server now ms}.
local prefix = ARGV[1]
local now = now_ms()
local due = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(due) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZADD', KEYS[2], 0, id)
  redis.call('HSET', prefix .. id, 'state', 'pending')
end
wake(KEYS[3], #due)
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local nxt = -1
if head[2] then nxt = tonumber(head[2]) end
return {#due, nxt, now}
