-- lane_status: what lanes hold and why they may be idle (read only).
-- transition: none (read only)
-- KEYS[1] emq:{q}:gactive (the lane index; the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] 'groups' then ARGV[3..] the groups named; or 'page',
-- ARGV[3] the cursor ('' for the first page, else the page before's next), ARGV[4] count: at most
-- that many more lanes of the lane index (lanes with waiting jobs, jobs in flight, a pause or a
-- wait), in the index's HSCAN order, each page sorted by name
-- The cursor is 'c:' (HSCAN on from cursor c) or 'c:g': a call that gave more than a page
-- holds is cut by name, and the next page calls it again and keeps the names after g. So a lane
-- listed from the first page to the last is seen at least once (HSCAN's promise), though a
-- resize of the index while one cut call is paged can show a lane twice, or, shrinking it, miss
-- one.
-- on ring is 1 when the lane is on the ring and can go on now (a lane paused, waiting or at
-- its limit leaves the ring when a claim next meets it).
-- Returns {next cursor ('' when no lane follows), then per lane {group, depth, in flight, limit
-- or 0, weight, paused 0/1, wait until ms or 0, on ring 0/1}}; a page of a queue of an earlier
-- layout (before the lane index) answers {'outdated'} until the upgrades have run on it.
-- fields: next, lanes...
-- fields of each lane: group, depth, in_flight, limit, weight, paused, wait_until, on_ring
-- cost: O(groups named) or O(count + log n): at most SCAN_CALLS calls of HSCAN COUNT count
local qp = ARGV[1]
local SCAN_CALLS = 4
local groups = {}
local nxt = ''
if ARGV[2] == 'groups' then
  for i = 3, #ARGV do groups[#groups + 1] = ARGV[i] end
else
  if redis.call('EXISTS', qp .. KEY.meta) == 1
    and redis.call('HGET', qp .. KEY.meta, 'layout') ~= LAYOUT then
    return {'outdated'}
  end
  local cursor, after = '0', nil
  if ARGV[3] ~= '' then
    local c, name = string.match(ARGV[3], '^(%d+):(.*)$')
    cursor = c
    if name ~= '' then after = name end
  end
  local count = tonumber(ARGV[4])
  for _ = 1, SCAN_CALLS do
    local r = redis.call('HSCAN', KEYS[1], cursor, 'COUNT', count)
    local names = {}
    for i = 1, #r[2], 2 do
      if not after or r[2][i] > after then names[#names + 1] = r[2][i] end
    end
    table.sort(names)
    local room = count - #groups
    if #names > room then
      for i = 1, room do groups[#groups + 1] = names[i] end
      nxt = cursor .. ':' .. names[room]
      break
    end
    for _, g in ipairs(names) do groups[#groups + 1] = g end
    cursor, after = r[1], nil
    if cursor == '0' then
      nxt = ''
      break
    end
    nxt = cursor .. ':'
    if #groups >= count then break end
  end
  table.sort(groups)
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
