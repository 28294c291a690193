-- lane_status: what lanes hold and why they may be idle (read only).
-- transition: none (read only)
-- KEYS[1] emq:{q}:lanes (the lane index; the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] 'groups' then ARGV[3..] the groups named; or 'page',
-- ARGV[3] after (the previous page's cursor: its last group; '' for the first page), ARGV[4]
-- count: the next lanes of the lane index (lanes with waiting jobs, jobs in flight, a pause or a
-- wait) in name order
-- on ring is 1 when the lane is on the ring and can go on now (a lane paused, waiting or at
-- its limit leaves the ring when a claim next meets it).
-- Returns {next cursor ('' when no lane follows), then per lane {group, depth, in flight, limit
-- or 0, weight, paused 0/1, wait until ms or 0, on ring 0/1}}; a page of a queue from before
-- the lane index answers {'uncounted'} until count_lanes has run on it once.
-- cost: O(groups named) or O(count + log n)
local qp = ARGV[1]
local groups = {}
local nxt = ''
if ARGV[2] == 'groups' then
  for i = 3, #ARGV do groups[#groups + 1] = ARGV[i] end
else
  if redis.call('EXISTS', qp .. KEY.meta) == 1
    and redis.call('HGET', qp .. KEY.meta, 'counted') ~= COUNTED then
    return {'uncounted'}
  end
  local from = '-'
  if ARGV[3] ~= '' then from = '(' .. ARGV[3] end
  local count = tonumber(ARGV[4])
  groups = redis.call('ZRANGE', KEYS[1], from, '+', 'BYLEX', 'LIMIT', 0, count + 1)
  if #groups > count then
    groups[#groups] = nil
    nxt = groups[#groups]
  end
end
local now = now_ms()
local out = {nxt}
for _, g in ipairs(groups) do
  local depth = redis.call('ZCARD', qp .. KEY.lane .. g)
  local in_flight = lane_in_flight(qp, g)
  local paused = lane_paused(qp, g)
  local until_ms = lane_wait_end(qp, g) or 0
  local limit = lane_limit(qp, g)
  -- lane_ready, from the values read for the row
  local ready = depth > 0 and not paused and until_ms <= now
    and not (limit and in_flight >= limit)
  local ring = 0
  if ready and redis.call('SISMEMBER', qp .. KEY.on_ring, g) == 1 then ring = 1 end
  local held = 0
  if paused then held = 1 end
  out[#out + 1] = {g, depth, in_flight, limit or 0, lane_weight(qp, g), held, until_ms, ring}
end
return out
