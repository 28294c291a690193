-- count_lanes: bring a queue written before the lane counter and the lane index up to date,
-- once: count the jobs waiting in its lanes (metrics.lane_pending), list its lanes in the lane
-- index, drop empty lanes from the lane groups, and mark it counted (meta.counted = 1).
-- Queues created since are counted from their first job and never need it.
-- transition: none (a queue's bookkeeping)
-- KEYS[1] emq:{q}:meta (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:
-- Returns {lanes indexed, jobs waiting in lanes}; {0, 0} when the queue was counted already.
-- cost: O(lanes), once per queue written by an earlier version; never again after.
local qp = ARGV[1]
if redis.call('HGET', KEYS[1], 'counted') == '1' then return {0, 0} end
local index = qp .. KEY.lane_index
local jobs, lanes = 0, 0
local function list(g)
  lanes = lanes + redis.call('ZADD', index, 0, g)
end
for _, g in ipairs(redis.call('SMEMBERS', qp .. KEY.lane_groups)) do
  local n = redis.call('ZCARD', qp .. KEY.lane .. g)
  if n > 0 then
    jobs = jobs + n
    list(g)
  else
    redis.call('SREM', qp .. KEY.lane_groups, g)
  end
end
for _, g in ipairs(redis.call('SMEMBERS', qp .. KEY.paused)) do list(g) end
for _, g in ipairs(redis.call('ZRANGE', qp .. KEY.lane_waits, 0, -1)) do list(g) end
for _, g in ipairs(redis.call('HKEYS', qp .. KEY.lane_in_flight)) do list(g) end
redis.call('HSET', qp .. KEY.metrics, 'lane_pending', jobs)
redis.call('HSET', KEYS[1], 'counted', 1)
return {lanes, jobs}
