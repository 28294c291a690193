-- count_lanes: bring a queue written before the lane counters up to date, once: count the jobs
-- waiting in its lanes (metrics.lane_pending) and its lanes with jobs (metrics.lanes_with_jobs),
-- list its lanes in the lane index, drop the set of lane groups that earlier versions kept
-- (lane_groups), and mark it counted (meta.counted = COUNTED).
-- Queues created since are counted from their first job and never need it.
-- transition: none (a queue's bookkeeping)
-- KEYS[1] emq:{q}:meta (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:
-- The lanes are those the earlier versions knew of: the lane groups, the lane index, the paused
-- and waiting lanes and those with jobs in flight.
-- Returns {lanes indexed, jobs waiting in lanes}; {0, 0} when the queue was counted already.
-- cost: O(lanes), once per queue written by an earlier version; never again after.
local qp = ARGV[1]
if redis.call('HGET', KEYS[1], 'counted') == COUNTED then return {0, 0} end
local index = qp .. KEY.lane_index
local known, seen = {}, {}
local function know(list)
  for _, g in ipairs(list) do
    if not seen[g] then
      seen[g] = true
      known[#known + 1] = g
    end
  end
end
know(redis.call('SMEMBERS', qp .. KEY.lane_groups))
know(redis.call('ZRANGE', index, 0, -1))
know(redis.call('SMEMBERS', qp .. KEY.paused))
know(redis.call('ZRANGE', qp .. KEY.lane_waits, 0, -1))
know(redis.call('HKEYS', qp .. KEY.lane_in_flight))
local jobs, with_jobs, listed = 0, 0, 0
for _, g in ipairs(known) do
  local n = redis.call('ZCARD', qp .. KEY.lane .. g)
  jobs = jobs + n
  if n > 0 then with_jobs = with_jobs + 1 end
  if n > 0 or lane_paused(qp, g) or lane_wait_end(qp, g)
    or redis.call('HEXISTS', qp .. KEY.lane_in_flight, g) == 1 then
    listed = listed + redis.call('ZADD', index, 0, g)
  else
    redis.call('ZREM', index, g)  -- nothing left: not listed
  end
end
redis.call('DEL', qp .. KEY.lane_groups)
redis.call('HSET', qp .. KEY.metrics, 'lane_pending', jobs, 'lanes_with_jobs', with_jobs)
redis.call('HSET', KEYS[1], 'counted', COUNTED)
return {listed, jobs}
