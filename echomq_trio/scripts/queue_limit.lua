-- queue_limit: set or clear a queue's cap on jobs in flight (meta.max_active): across every
-- consumer and process, a claim leases at most the cap less the jobs in active (leased now),
-- beside each lane's own limit. A cap lowered below what runs takes nothing back: jobs leased
-- finish, and claims answer nothing until active is below the cap. A cap raised or cleared
-- wakes parked consumers for the room it made (settling a job under a cap wakes one: cap_freed).
-- transition: none (a queue setting)
-- KEYS[1] emq:{q}:meta (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] the cap (>= 1), or '' to clear it
-- Returns {the cap in effect (0: none), jobs in active}.
-- fields: max_active, active
-- cost: O(1)
local qp = ARGV[1]
created(qp, nil)
local active = redis.call('ZCARD', qp .. KEY.active)
local was = tonumber(redis.call('HGET', KEYS[1], 'max_active') or '0')
local cap = tonumber(ARGV[2]) or 0
if cap > 0 then
  redis.call('HSET', KEYS[1], 'max_active', cap)
else
  redis.call('HDEL', KEYS[1], 'max_active')
end
if cap ~= was then emit(qp, 'queue_limit', string.sub(qp, 6, -3), 'max_active', cap) end
-- A cap cleared or raised: room for consumers it may have held back.
if was > 0 and (cap == 0 or cap > was) then
  local waiting = redis.call('ZCARD', qp .. KEY.pending)
    + tonumber(redis.call('HGET', qp .. KEY.metrics, 'lane_pending') or '0')
  local room = waiting
  if cap > 0 and cap - active < room then room = cap - active end
  wake(qp, room)
end
return {cap, active}
