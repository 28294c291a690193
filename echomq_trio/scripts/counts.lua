-- counts: a consistent snapshot of a queue's sizes (read only).
-- transition: none (read only)
-- KEYS[1] emq:{q}:pending (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:
-- Jobs waiting in lanes are the counter metrics.lane_pending, and lanes with jobs the counter
-- metrics.lanes_with_jobs, kept by every script that puts a job into a lane or takes one out; a
-- queue of an earlier layout (meta.layout, before those counters) answers {'outdated'} until
-- the upgrades (echomq_trio/_layouts.py) have run on it.
-- Returns {exists (1 if the queue was ever used), pending (flat + lanes), scheduled, active,
-- dead, lanes with jobs, paused lanes, waiting lanes, completed total, retried total,
-- dead total, deferred total, repeats, cancelled (kept), cancelled total, expired total (jobs a
-- claim met past their expiry: kept dead, or dropped), flows' parents waiting for their
-- children}, or {'outdated'}.
-- fields: exists, pending, scheduled, active, dead, lanes, paused_lanes, waiting_lanes,
--         completed_total, retried_total, dead_total, deferred_total, repeats, cancelled,
--         cancelled_total, expired_total, waiting_children
-- cost: O(1)
local qp = ARGV[1]
local exists = redis.call('EXISTS', qp .. KEY.meta)
if exists == 1 and redis.call('HGET', qp .. KEY.meta, 'layout') ~= LAYOUT then
  return {'outdated'}
end
local m = redis.call('HMGET', qp .. KEY.metrics, 'completed', 'retried', 'dead', 'deferred',
  'lane_pending', 'lanes_with_jobs', 'cancelled', 'expired')
return {
  exists,
  redis.call('ZCARD', KEYS[1]) + tonumber(m[5] or 0), redis.call('ZCARD', qp .. KEY.schedule),
  redis.call('ZCARD', qp .. KEY.active), redis.call('ZCARD', qp .. KEY.dead),
  tonumber(m[6] or 0), redis.call('SCARD', qp .. KEY.paused),
  redis.call('ZCARD', qp .. KEY.lane_waits),
  tonumber(m[1] or 0), tonumber(m[2] or 0), tonumber(m[3] or 0), tonumber(m[4] or 0),
  redis.call('ZCARD', qp .. KEY.repeats),
  redis.call('ZCARD', qp .. KEY.cancelled), tonumber(m[7] or 0), tonumber(m[8] or 0),
  redis.call('ZCARD', qp .. KEY.parents),
}
