-- delete: delete waiting jobs for good, rows and all: one job by id ('one'), or a page of the
-- jobs of one set that match a filter ('page'). A lane job leaves its lane with the lane's
-- order and counters exact (metrics.lane_pending, lanes with jobs, the lane index); a lane that
-- waits keeps its wait. A running job is never deleted (cancel it); a dead one is discard's.
-- transition: pending | pending (lane) | pending (lane, waiting) | scheduled | waiting_children -> (none) | dead | pending
-- KEYS[1] emq:{q}:pending (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] 'one' or 'page'
-- 'one': ARGV[3] job id. Returns 'deleted', 'running' (active: not deleted), 'not_waiting'
-- (dead, or another state that is not waiting) or 'gone' (no row). One event 'deleted'.
-- 'page': ARGV[3] the set: 'pending' (the flat set), 'lane' (ARGV[4]'s) or 'scheduled',
-- ARGV[4] group (a lane's; for 'scheduled' only jobs of that lane, '' any), ARGV[5] older than
-- ms (only jobs minted at least that long before the server's now, by the time in their id;
-- '' any), ARGV[6] how many jobs of the set to look at, ARGV[7] the cursor: '' from the start,
-- else the page before's next. The jobs looked at that match are deleted; the pending set and a
-- lane are in id (mint) order within a priority (a score), so the first job too young ends the
-- walk of its score: the walk goes on at the next score, or ends at the last. One event
-- 'deleted_many' per page (its first id, count, ids).
-- Returns {jobs deleted, the next page's cursor ('' after the last)}.
-- fields: deleted, next
-- A flow's child deleted ends for its parent as a cancelled one does (flow_end); a flow's parent
-- waiting for its children is not waiting to run ('not_waiting': cancel it).
-- cost: O(limit) (each step O(log n); a flow's child's parent that dies with it, and its
-- parents, O(log n) each)
local qp = ARGV[1]
local now = now_ms()
local lane_gone = {}  -- group -> jobs taken from its lane by this call

local function remove(id, g, scheduled)
  if scheduled then
    redis.call('ZREM', qp .. KEY.schedule, id)
  elseif g then
    if redis.call('ZREM', qp .. KEY.lane .. g, id) == 1 then
      lane_gone[g] = (lane_gone[g] or 0) + 1
    end
  else
    redis.call('ZREM', KEYS[1], id)
  end
  -- a flow's child: its parent fails, or goes on (its on_fail), as for a cancel
  local parent = redis.call('HGET', qp .. KEY.job .. id, 'parent')
  if parent then flow_end(qp, id, parent, 'deleted', 'deleted', now) end
  redis.call('DEL', qp .. KEY.job .. id)
end

-- The lanes this call took jobs from: their counters, once each.
local function lanes_settled()
  local n = 0
  for g, gone in pairs(lane_gone) do
    n = n + gone
    if redis.call('ZCARD', qp .. KEY.lane .. g) == 0 then lane_emptied(qp, g) end
  end
  if n > 0 then redis.call('HINCRBY', qp .. KEY.metrics, 'lane_pending', -n) end
end

if ARGV[2] == 'one' then
  local id = ARGV[3]
  local f = redis.call('HMGET', qp .. KEY.job .. id, 'state', 'group')
  local state = job_state(qp, id, f[1] or nil)
  if not state then return 'gone' end
  if state == 'active' then return 'running' end
  if state ~= 'pending' and state ~= 'scheduled' then return 'not_waiting' end
  remove(id, f[2] or nil, state == 'scheduled')
  lanes_settled()
  emit(qp, 'deleted', id)
  return 'deleted'
end

-- The mint time of a branded id (3 capitals, then 11 base-62 digits of ts << 22 | ...): Unix ms.
local function minted_ms(id)
  local v = 0
  for i = 4, 14 do
    local b = string.byte(id, i)
    local d = b - 61  -- a-z
    if b <= 57 then d = b - 48 elseif b <= 90 then d = b - 55 end  -- 0-9, A-Z
    v = v * 62 + d
  end
  return math.floor(v / 4194304) + ID_EPOCH_MS
end

local set, g = ARGV[3], ARGV[4]
local key = KEYS[1]
if set == 'lane' then
  key = qp .. KEY.lane .. g
elseif set == 'scheduled' then
  key = qp .. KEY.schedule
end
local by_id = set ~= 'scheduled'  -- in id order within a score (a priority)
local before = nil
if ARGV[5] ~= '' then before = now - tonumber(ARGV[5]) end
local limit = tonumber(ARGV[6])
-- The cursor: the score of the last job looked at, and how many at that score were kept.
local from, skip = '-inf', 0
if ARGV[7] ~= '' then
  local score, kept = string.match(ARGV[7], '^(.-):(%d+)$')
  from, skip = score, tonumber(kept)
end
local page = redis.call('ZRANGE', key, from, '+inf', 'BYSCORE', 'LIMIT', skip, limit,
  'WITHSCORES')
local gone = {}
local score, kept = from, skip
local ended = #page < 2 * limit  -- the set has no more
for i = 1, #page, 2 do
  local id = page[i]
  if page[i + 1] ~= score then score, kept = page[i + 1], 0 end
  local match = true
  if before and minted_ms(id) > before then
    if by_id then  -- every job after it at its score is younger still: on to the next score
      local last = redis.call('ZRANGE', key, 0, 0, 'REV', 'WITHSCORES')
      ended = last[2] == nil or tonumber(last[2]) <= tonumber(score)
      score, kept = '(' .. score, 0
      break
    end
    match = false
  end
  if match and set == 'scheduled' and g ~= '' then
    match = redis.call('HGET', qp .. KEY.job .. id, 'group') == g
  end
  if match then
    remove(id, set == 'lane' and g or nil, set == 'scheduled')
    gone[#gone + 1] = id
  else
    kept = kept + 1
  end
end
lanes_settled()
if #gone > 0 then
  emit(qp, 'deleted_many', gone[1], 'count', #gone, 'ids', table.concat(gone, ' '))
end
if ended then return {#gone, ''} end
return {#gone, score .. ':' .. kept}
