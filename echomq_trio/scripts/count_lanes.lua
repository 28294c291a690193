-- count_lanes: bring a queue written before the lane counters and the lane index were as they
-- are now to layout 3, once: count the jobs waiting in its lanes (metrics.lane_pending) and its
-- lanes with jobs (metrics.lanes_with_jobs), list its lanes in the lane index (a hash: each
-- lane's jobs in flight, plus WAITING while jobs wait in it), drop the structures earlier
-- versions kept instead (the set of lane groups, the lane index by name), and mark its layout
-- (meta.layout = 3; the mark before layouts, meta.counted, goes). A lane with jobs that can go
-- on is put back on the ring if it is not on it.
-- Queues created since are counted from their first job and never need it. A queue an earlier
-- version marked counted = 3 (this layout, under the old mark) is only re-marked.
-- upgrade: layout 3
-- transition: none (a queue's bookkeeping)
-- KEYS[1] emq:{q}:meta (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:
-- The lanes are those the earlier versions knew of: the lane groups, either lane index, the
-- paused and waiting lanes. A lane's jobs in flight are what its index value holds (an earlier
-- version's value is the count alone).
-- Returns {lanes indexed, jobs waiting in lanes}; {0, 0} when the queue had layout 3 already.
-- fields: lanes, waiting
-- cost: O(lanes), once per queue written by an earlier version; never again after.
local qp = ARGV[1]
local layout = tonumber(redis.call('HGET', KEYS[1], 'layout') or '0')
if layout >= 3 then return {0, 0} end
if redis.call('HGET', KEYS[1], 'counted') == '3' then
  redis.call('HSET', KEYS[1], 'layout', 3)
  redis.call('HDEL', KEYS[1], 'counted')
  return {0, 0}
end
local index = qp .. KEY.lane_index
local now = now_ms()
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
know(redis.call('ZRANGE', qp .. KEY.old_lane_index, 0, -1))
know(redis.call('SMEMBERS', qp .. KEY.paused))
know(redis.call('ZRANGE', qp .. KEY.lane_waits, 0, -1))
know(redis.call('HKEYS', index))
local jobs, with_jobs, listed = 0, 0, 0
for _, g in ipairs(known) do
  local n = redis.call('ZCARD', qp .. KEY.lane .. g)
  jobs = jobs + n
  local in_flight = lane_entry(redis.call('HGET', index, g))
  local value = in_flight
  if n > 0 then
    with_jobs = with_jobs + 1
    value = in_flight + WAITING
  end
  if value > 0 or lane_paused(qp, g) or lane_wait_end(qp, g) then
    redis.call('HSET', index, g, value)
    listed = listed + 1
    -- on the ring if it can go on (a lane an earlier version's bookkeeping may have left off)
    if n > 0 then ring_add(qp, g, now, n, in_flight) end
  else
    redis.call('HDEL', index, g)  -- nothing left: not listed
  end
end
redis.call('DEL', qp .. KEY.lane_groups, qp .. KEY.old_lane_index)
redis.call('HSET', qp .. KEY.metrics, 'lane_pending', jobs, 'lanes_with_jobs', with_jobs)
redis.call('HSET', KEYS[1], 'layout', 3)
redis.call('HDEL', KEYS[1], 'counted')
return {listed, jobs}
