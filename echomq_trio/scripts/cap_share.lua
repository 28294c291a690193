-- cap_share: one partition's share of its queue's cap on jobs in flight (cap_total): its own
-- cap (meta.max_active, which claim enforces as any queue's), moved by a round of epoch E and
-- fenced by the epoch the partition was last stamped with (meta.cap_epoch). 'stamp' marks the
-- partition with E (refused when it carries a newer one) and reads it; 'lower' sets a lower
-- cap and 'raise' a higher one, each refused unless the partition carries E, so a round begun
-- later, which stamps every partition before it raises anything, sees every raise of an
-- earlier round or refuses it. 'clear' removes the cap (refused when the partition carries a
-- newer epoch) and stamps E, so an earlier round cannot put a cap back. A cap may be 0: claims
-- lease nothing. A raise or a clear wakes parked consumers for the room it made, as
-- queue_limit does. A lower never takes a job back: claims wait until fewer run.
-- transition: none (a queue setting)
-- KEYS[1] emq:{q}:meta, the partition's (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] 'stamp', 'lower', 'raise' or 'clear', ARGV[3] the
-- epoch E, ARGV[4] the cap (lower, raise: >= 0)
-- Returns {1 when refused by the fence, else 0; the cap in effect (-1: none); jobs in active;
-- jobs waiting to be claimed (pending and in lanes)}.
-- fields: fenced, max_active, active, waiting
-- cost: O(1)
local qp = ARGV[1]
local mode = ARGV[2]
local epoch = tonumber(ARGV[3])
created(qp, nil)
local m = redis.call('HMGET', KEYS[1], 'cap_epoch', 'max_active')
local stamped = tonumber(m[1] or '0')
local cap = tonumber(m[2] or '-1')
local active = redis.call('ZCARD', qp .. KEY.active)
local waiting = redis.call('ZCARD', qp .. KEY.pending)
  + tonumber(redis.call('HGET', qp .. KEY.metrics, 'lane_pending') or '0')
local fenced
if mode == 'stamp' or mode == 'clear' then fenced = stamped > epoch else fenced = stamped ~= epoch end
if fenced then return {1, cap, active, waiting} end
local was = cap
if mode == 'stamp' then
  if stamped < epoch then redis.call('HSET', KEYS[1], 'cap_epoch', epoch) end
elseif mode == 'clear' then
  redis.call('HSET', KEYS[1], 'cap_epoch', epoch)
  redis.call('HDEL', KEYS[1], 'max_active')
  cap = -1
else
  local want = tonumber(ARGV[4])
  if (mode == 'lower' and (cap < 0 or want < cap)) or (mode == 'raise' and cap >= 0 and want > cap)
  then
    redis.call('HSET', KEYS[1], 'max_active', want)
    cap = want
  end
end
-- A cap raised or cleared: room for the consumers it held back (they park on the wake list).
if was >= 0 and (cap < 0 or cap > was) then
  local room = waiting
  if cap >= 0 and cap - active < room then room = cap - active end
  wake(qp, room)
end
return {0, cap, active, waiting}
