-- reap: return jobs whose lease expired (their worker died or hung) to pending or their lane,
-- so another worker claims them. Attempts are unchanged; the next claim raises them.
-- transition: active -> pending | pending (lane)
-- KEYS[1] emq:{q}:active (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] batch
-- While the queue's waits are being carried across a step of the clock (meta.clock_fix, see
-- clock.lua) nothing is reaped: a lease deadline from before a step forward is not an expiry.
-- Returns {reaped, server now ms, 1 while the clock's step is being carried (else 0)}.
-- cost: O(batch), each O(log n)
local qp = ARGV[1]
local now = now_ms()
if redis.call('HEXISTS', qp .. KEY.meta, 'clock_fix') == 1 then return {0, now, 1} end
local expired = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[2]))
local flat = 0
for _, id in ipairs(expired) do
  redis.call('ZREM', KEYS[1], id)
  local g = redis.call('HGET', qp .. KEY.job .. id, 'group') or nil
  flat = flat + to_waiting(qp, id, g, now)
  emit(qp, 'reaped', id)
  if g then lane_done(qp, g, now) end
end
wake(qp, flat)
return {#expired, now, 0}
