-- promote: move scheduled jobs whose run-at has come to pending (or back into their lane), and
-- bring lanes whose wait is over back onto the ring.  scheduled -> pending
-- KEYS[1] emq:{q}:schedule (other keys derive from ARGV[1], same slot)
-- ARGV[1] queue prefix, ARGV[2] batch (most jobs and most lanes handled by this call)
-- Returns {jobs moved, lanes resumed, next due time (earliest run-at or lane wait, server ms;
-- -1 when none), server now ms}.
local qp = ARGV[1]
local batch = tonumber(ARGV[2])
local now = now_ms()
local due = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, batch)
local flat = 0
for _, id in ipairs(due) do
  redis.call('ZREM', KEYS[1], id)
  local row = qp .. 'job:' .. id
  redis.call('HSET', row, 'state', 'pending')
  local g = redis.call('HGET', row, 'group')
  if g then
    lane_push(qp, g, id, now)
  else
    redis.call('ZADD', qp .. 'pending', 0, id)
    flat = flat + 1
  end
end
wake(qp, flat)
local lanes = redis.call('ZRANGE', qp .. 'gwait', '-inf', now, 'BYSCORE', 'LIMIT', 0, batch)
for _, g in ipairs(lanes) do
  redis.call('ZREM', qp .. 'gwait', g)
  ring_add(qp, g, now)
end
local nxt = -1
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if head[2] then nxt = tonumber(head[2]) end
head = redis.call('ZRANGE', qp .. 'gwait', 0, 0, 'WITHSCORES')
if head[2] and (nxt < 0 or tonumber(head[2]) < nxt) then nxt = tonumber(head[2]) end
return {#due, #lanes, nxt, now}
