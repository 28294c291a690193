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
    and redis.call('HGET', qp .. KEY.meta, 'counted') ~= '1' then
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
  local ring = 0
  if redis.call('SISMEMBER', qp .. KEY.on_ring, g) == 1 and lane_ready(qp, g, now) then ring = 1 end
  out[#out + 1] = {
    g,
    redis.call('ZCARD', qp .. KEY.lane .. g),
    tonumber(redis.call('HGET', qp .. KEY.lane_in_flight, g) or '0'),
    tonumber(redis.call('HGET', qp .. KEY.lane_limits, g) or '0'),
    tonumber(redis.call('HGET', qp .. KEY.lane_weights, g) or '1'),
    redis.call('SISMEMBER', qp .. KEY.paused, g),
    tonumber(redis.call('ZSCORE', qp .. KEY.lane_waits, g) or '0'),
    ring,
  }
end
return out
